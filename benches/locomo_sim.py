#!/usr/bin/env python3
"""An offline model of hybrid retrieval on LoCoMo, for screening a ranking idea before building it.

The bench (`cargo bench --bench locomo`) measures the service; a run takes minutes. This
script reproduces, in memory, what a hybrid search does to one conversation: the same model
and tokenizer, the same in-context vectors (a turn blended with "previous + turn"), Okapi
BM25 with k1 1.2 and b 0.5, relative-score fusion of the two candidate lists, and session
neighbours (reach, decay, weight). Without sessions (the default) every turn belongs to one
implicit conversation, as the bench's `--no-sessions` stores them; `with_sessions=True`
models the bench's default run (neighbours and context within a session, the metadata's
strings in the keyword document). With the engine's defaults it lands within 0.7 points of
the bench at R@5/10/25/50 in both settings (docs/benchmarks.md, "Fifty candidates per list,
and ranking ideas screened offline"), so an idea that moves nothing here is not worth
building; one that does still has to be built and measured by the bench.

It is an approximation: PostgreSQL's stemmer and stop words differ a little from Snowball's,
a document's length here counts words where the engine counts distinct lexemes, every
candidate's neighbours reach `reach` turns (the engine: the better half of the episodes it
looks up), and the engine's keyword budget (`keyword_common_df`) is modelled only for widened
words (`expand_budget`).

    python3 -m venv /tmp/sim && /tmp/sim/bin/pip install onnxruntime tokenizers numpy snowballstemmer
    /tmp/sim/bin/python benches/locomo_sim.py ../shared/data/locomo_dev.json "" "depth=50" "bigram=2.0"
    /tmp/sim/bin/python benches/locomo_sim.py ../shared/data/locomo_dev.json "rerank=20" "with_sessions=True,rerank=20"

Each argument after the file is one variant: keyword arguments of `run` (empty: defaults).
Embeddings are computed once and kept in target/locomo_sim.npz.
"""

import collections
import json
import math
import os
import pickle
import re
import sys

import numpy as np
import onnxruntime
import snowballstemmer
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, ".deps/model/model-compact.onnx")
TOKENIZER = os.path.join(ROOT, ".deps/model/tokenizer.json")
CACHE = os.path.join(ROOT, "target/locomo_sim.npz")
# Token vectors (before pooling) of every turn and question, for the second stage's variants.
TOKEN_CACHE = os.path.join(ROOT, "target/locomo_sim_tokens.pkl")
# Every stem of the turns with the vector of its most frequent word embedded alone, for the
# query-expansion variant (`expand`).
VOCAB_CACHE = os.path.join(ROOT, "target/locomo_sim_vocab.npz")
MAX_TOKENS = 256

STEMMER = snowballstemmer.stemmer("english")
STOP = set(
    "i me my myself we our ours ourselves you your yours yourself yourselves he him his himself"
    " she her hers herself it its itself they them their theirs themselves what which who whom"
    " this that these those am is are was were be been being have has had having do does did"
    " doing a an the and but if or because as until while of at by for with about against"
    " between into through during before after above below to from up down in out on off over"
    " under again further then once here there when where why how all any both each few more"
    " most other some such no nor not only own same so than too very s t can will just don"
    " should now".split()
)
# A question's interrogative opening ("what did", "how many ... do"), for the stripped-query variant.
INTERROGATIVE = re.compile(
    r"^(what|when|where|who|whom|whose|which|why|how)(\s+(many|much|long|often|old|kind of|type of|"
    r"types of|kinds of))?(\s+(did|does|do|is|are|was|were|has|have|had|can|could|would|will|"
    r"should|might))?\s+",
    re.I,
)


def words(text):
    return [STEMMER.stemWord(w) for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP]


class Embedder:
    """Mean pooling over the attention mask and L2 normalisation, as the service does."""

    def __init__(self):
        self.tokenizer = Tokenizer.from_file(TOKENIZER)
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 2
        self.session = onnxruntime.InferenceSession(MODEL, options)

    def batches(self, texts):
        """For every 16 texts: their encodings, token ids (cut at MAX_TOKENS as the service
        cuts them), attention mask and the model's last hidden state."""
        for start in range(0, len(texts), 16):
            encodings = self.tokenizer.encode_batch(texts[start : start + 16])
            ids = [e.ids if len(e.ids) <= MAX_TOKENS else e.ids[: MAX_TOKENS - 1] + [e.ids[-1]] for e in encodings]
            width = max(len(x) for x in ids)
            tokens = np.zeros((len(ids), width), np.int64)
            mask = np.zeros_like(tokens)
            for row, x in enumerate(ids):
                tokens[row, : len(x)] = x
                mask[row, : len(x)] = 1
            hidden = self.session.run(
                None, {"input_ids": tokens, "attention_mask": mask, "token_type_ids": np.zeros_like(tokens)}
            )[0]
            yield encodings, ids, mask, hidden

    def tokens(self, texts):
        """Each text's token vectors without [CLS] and [SEP], unit length, and its word pieces."""
        out = []
        for encodings, ids, _, hidden in self.batches(texts):
            for row, (x, e) in enumerate(zip(ids, encodings)):
                h = hidden[row, 1 : len(x) - 1]
                h = h / np.linalg.norm(h, axis=1, keepdims=True)
                out.append((h.astype(np.float16), e.tokens[1 : len(x) - 1]))
        return out

    def __call__(self, texts):
        out = []
        for _, _, mask, hidden in self.batches(texts):
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
            out.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
        return np.vstack(out)


def load(path):
    """Each conversation's turns (as the bench stores them), questions and embeddings."""
    data = json.load(open(path))
    cached = dict(np.load(CACHE)) if os.path.exists(CACHE) else {}
    token_cache = pickle.load(open(TOKEN_CACHE, "rb")) if os.path.exists(TOKEN_CACHE) else {}
    tokens_added = False
    embed = None
    conversations = []
    for conversation in data:
        c = conversation["conversation"]
        texts, ids, sessions, metadata = [], [], [], []
        n = 1
        while f"session_{n}" in c:
            for t in c[f"session_{n}"]:
                text = f"{t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    text += f" [image: {t['blip_caption']}]"
                texts.append(text)
                ids.append(t["dia_id"])
                sessions.append(n)
                # The string values of the metadata the bench sends with sessions.
                metadata.append(f"{t['dia_id']} {c.get(f'session_{n}_date_time', '')} {t['speaker']}")
            n += 1
        questions = [q for q in conversation["qa"] if q["category"] != 5 and q.get("evidence")]
        key = conversation["sample_id"]
        wanted = {
            "own": lambda: texts,
            "previous": lambda: [texts[i - 1] + " " + texts[i] for i in range(1, len(texts))],
            "next": lambda: [texts[i] + " " + texts[i + 1] for i in range(len(texts) - 1)],
            "window": lambda: [" ".join(texts[i - 1 : i + 2]) for i in range(1, len(texts) - 1)],
            "query": lambda: [q["question"] for q in questions],
            "stripped": lambda: [INTERROGATIVE.sub("", q["question"].strip()).rstrip("?") or q["question"] for q in questions],
        }
        vectors = {}
        for name, make in wanted.items():
            if f"{key}/{name}" not in cached:
                embed = embed or Embedder()
                cached[f"{key}/{name}"] = embed(make())
            vectors[name] = cached[f"{key}/{name}"]
        if key not in token_cache:
            embed = embed or Embedder()
            token_cache[key] = (embed.tokens(texts), embed.tokens([q["question"] for q in questions]))
            tokens_added = True
        conversations.append(
            dict(turn_tokens=token_cache[key][0], query_tokens=token_cache[key][1], ids=ids, words=[words(t) for t in texts], sessions=sessions,
                 metadata_words=[words(m) for m in metadata], questions=questions,
                 query_words=[words(q["question"]) for q in questions], vectors=vectors)
        )
    # The turns' vocabulary (what a store would have seen), each stem as its most frequent
    # word, embedded alone: the word vectors the `expand` variant widens a query with.
    surfaces = collections.defaultdict(collections.Counter)
    for conversation in data:
        c = conversation["conversation"]
        n = 1
        while f"session_{n}" in c:
            for t in c[f"session_{n}"]:
                for w in re.findall(r"[a-z0-9]+", t["text"].lower()):
                    if w not in STOP:
                        surfaces[STEMMER.stemWord(w)][w] += 1
            n += 1
    stems = sorted(surfaces)
    vocab = dict(np.load(VOCAB_CACHE)) if os.path.exists(VOCAB_CACHE) else {}
    if list(vocab.get("stems", [])) != stems:
        embed = embed or Embedder()
        vocab = {"stems": np.array(stems), "vectors": embed([surfaces[s].most_common(1)[0][0] for s in stems])}
        np.savez(VOCAB_CACHE, **vocab)
    index = {s: i for i, s in enumerate(stems)}
    for conversation in conversations:
        conversation["vocab_index"], conversation["vocab_vectors"] = index, vocab["vectors"]
    if embed is not None:
        np.savez(CACHE, **cached)
    if tokens_added:
        pickle.dump(token_cache, open(TOKEN_CACHE, "wb"))
    return conversations


def spread(values, sigmas):
    """`values` scaled over their mean plus and minus `sigmas` standard deviations, clipped to
    [0, 1] (distribution-based score fusion, as Qdrant's DBSF), instead of their own range."""
    mu, sd = float(np.mean(values)), float(np.std(values)) or 1.0
    lo, hi = mu - sigmas * sd, mu + sigmas * sd
    return [min(1.0, max(0.0, (v - lo) / (hi - lo))) for v in values]


def min_max(values, floor_rank=None):
    hi = values[0] if values else 0.0
    lo = values[-1] if floor_rank is None or len(values) <= floor_rank else values[floor_rank - 1]
    return [max(0.0, (v - lo) / (hi - lo)) if hi > lo else 1.0 for v in values]


def run(conversations, semantic_weight=0.4, neighbour_weight=0.4, reach=2, decay=0.75,
        context_weight=0.5, depth=50, k1=1.2, b=0.5, expand_previous=0.0, expand_next=0.0,
        next_weight=0.0, window_weight=0.0, query="plain", bigram=0.0, prf=0, prf_terms=5,
        prf_weight=0.3, semantic_floor=None, keyword_floor=None, with_sessions=False,
        session_prior=0.0, rerank=0, rerank_weight=0.5, rerank_query="content", rerank_both_ways=False,
        rerank_bits=0, rerank_seed=7, rerank_signs=False, mmr=0.0, mmr_depth=50, session_cap=0,
        expand=0, expand_min=0.5, expand_weight=0.3, expand_budget=None, report=None,
        rerank_near=0.0, rerank_near_turns=1, rerank_near_far=None, fusion_sigmas=0.0, alike_top=0,
        alike_m=10, alike_weight=0.7, alike_other_sessions=True):
    """R@5/10/25/50 over every question, and R@10 per category.

    `rerank` > 0 models the second stage (`retrieval.rerank`): the `rerank` most relevant
    after sessions, scored by MaxSim of the question's token vectors against each turn's
    ("content": whole-word pieces not in the stop list, as the engine; "words": every
    whole-word piece; "all": every token), both min-max normalised over the set and
    blended with `rerank_weight`, redrawn inside the set's range. `rerank_both_ways` also
    averages in the turn's tokens' best matches in the question. `rerank_bits` > 0 reads
    every token vector as a sketch: the signs of that many fixed random projections (seed
    `rerank_seed`; `rerank_signs`: projections of +1 and -1 only), what a stored form of
    the turns' tokens would keep. `rerank_near` > 0 reads each turn with the turns just
    before and after it in its session (the engine's `neighbour_share`): each question token
    takes its best match among the turn's own tokens or theirs at that share of likeness
    (the engine reads a member's neighbours only where its session lookup reached them);
    `rerank_near_turns` 2 reads two turns each side (the engine's default), the second at
    `rerank_near_far` (default: the same share).

    `expand` > 0 widens the keyword query: each query word whose stem the conversation's
    turns hold brings up to `expand` of the conversation's stems whose words' vectors (each
    word embedded alone) are at least `expand_min` alike to its own, weighted
    `expand_weight` times that likeness ("instrument" brings "guitar", "violin", "piano").

    `expand_budget` (the engine: `keyword_common_df`, 1,000) keeps only the widened words that
    fit the budget of matches the query's own words leave, rarest first, as the engine does.

    `fusion_sigmas` > 0 scales each list's scores over their mean plus and minus that many
    standard deviations instead of their range (distribution-based fusion).

    `alike_top` > 0 passes relevance along likeness between memories, as a memory graph
    would: after session sharing, each of the best `alike_top` gives each of its `alike_m`
    nearest turns by stored vector (with `alike_other_sessions`, outside its own session;
    else beyond the `reach` turns around it) `alike_weight` times its relevance times their
    cosine, where that is more than they have.

    `report`, a list, receives every question's (conversation, question, final order of turn
    ids), to look at where the evidence the top 10 misses sits.
    """
    sketch = None
    if rerank_bits:
        projection = np.random.default_rng(rerank_seed).standard_normal((384, rerank_bits)).astype(np.float32)
        if rerank_signs:
            projection = np.sign(projection)
        sketch = lambda v: np.sign(v.astype(np.float32) @ projection) / math.sqrt(rerank_bits)
    recall = collections.defaultdict(list)
    # How each list's scores are scaled before fusion: over their range, or their spread.
    scale = (lambda v, floor: spread(v, fusion_sigmas) if v else v) if fusion_sigmas else min_max
    for c in conversations:
        v = c["vectors"]
        n = len(c["ids"])
        # The stored vector: the turn blended with "previous + turn" (indexer.session_context_weight).
        stored = v["own"].copy()
        stored[1:] = (1 - context_weight) * v["own"][1:] + context_weight * v["previous"]
        session = c["sessions"] if with_sessions else [0] * n
        if with_sessions:  # a session's first turn has no previous turn to be read after
            first = [i for i in range(1, n) if session[i] != session[i - 1]]
            stored[first] = v["own"][first]
        if next_weight:
            stored[:-1] += next_weight * v["next"]
        if window_weight:
            stored[1:-1] += window_weight * v["window"]
        stored /= np.linalg.norm(stored, axis=1, keepdims=True)
        # Keyword documents: a turn's own words, and optionally its neighbours' at a fraction.
        documents, bigrams = [], []
        for i, own in enumerate(c["words"]):
            counts = collections.Counter(own + (c["metadata_words"][i] if with_sessions else []))
            tf = {w: float(k) for w, k in counts.items()}
            for j, share in ((i - 1, expand_previous), (i + 1, expand_next)):
                if share and 0 <= j < n:
                    for w in set(c["words"][j]) - counts.keys():
                        tf[w] = tf.get(w, 0.0) + share
            documents.append((tf, sum(counts.values())))
            bigrams.append(set(zip(own, own[1:])))
        average = sum(length for _, length in documents) / n
        df = collections.Counter(w for tf, _ in documents for w in tf)

        def idf(w):
            return math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))

        def bm25(weights, pairs=()):
            scores = np.zeros(n)
            for i, (tf, length) in enumerate(documents):
                s = 0.0
                for w, weight in weights.items():
                    f = tf.get(w, 0.0)
                    if f:
                        s += weight * idf(w) * f * (k1 + 1) / (f + k1 * (1 - b + b * length / average))
                for pair in pairs:
                    if pair in bigrams[i]:
                        s += bigram * (idf(pair[0]) + idf(pair[1])) / 2
                scores[i] = s
            return scores

        if expand:
            # The conversation's stems that have a word vector, for widening queries.
            doc_stems = sorted(w for w in df if w in c["vocab_index"])
            doc_matrix = c["vocab_vectors"][[c["vocab_index"][w] for w in doc_stems]]

        def widened(query_words):
            weights = {w: 1.0 for w in set(query_words)}
            for q in set(query_words) if expand else ():
                if q not in c["vocab_index"]:
                    continue
                likeness = doc_matrix @ c["vocab_vectors"][c["vocab_index"][q]]
                taken = 0
                for j in np.argsort(-likeness):
                    if likeness[j] < expand_min or taken >= expand:
                        break
                    if weights.get(doc_stems[j], 0.0) < 1.0:
                        weights[doc_stems[j]] = max(weights.get(doc_stems[j], 0.0), expand_weight * float(likeness[j]))
                        taken += 1
            if expand_budget is not None:
                # The engine's budget (`keyword_common_df`): the query's own words take their
                # matches rarest first, the widened words what is left; a widened word that
                # does not fit is left out instead of scoring every common match a little.
                # A query whose own words all miss the budget looks at recent matches only,
                # which its widened words do not pick either.
                budget, picked = expand_budget, 0
                for w in sorted((w for w, x in weights.items() if x >= 1.0 and df[w]), key=lambda w: df[w]):
                    if df[w] > budget:
                        break
                    budget -= df[w]
                    picked += 1
                if not picked and any(df[w] for w, x in weights.items() if x >= 1.0):
                    budget = -1
                for w in sorted((w for w, x in weights.items() if x < 1.0), key=lambda w: df[w]):
                    if df[w] > budget:
                        weights.pop(w)
                    else:
                        budget -= df[w]
            return weights

        queries = {"plain": v["query"], "stripped": v["stripped"]}.get(query)
        if queries is None:  # "both": the mean of the two
            queries = v["query"] + v["stripped"]
            queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        similarities = queries @ stored.T
        for qi, (question, query_words, cosine) in enumerate(zip(c["questions"], c["query_words"], similarities)):
            pairs = set(zip(query_words, query_words[1:])) if bigram else set()
            keyword = bm25(widened(query_words), pairs)
            if prf:
                # Keyword relevance feedback: the best terms of the first pass's top turns.
                first = (semantic_weight * (cosine - cosine.min()) / (np.ptp(cosine) or 1)
                         + (1 - semantic_weight) * keyword / (keyword.max() or 1))
                terms = collections.Counter()
                for i in np.argsort(-first)[:prf]:
                    for w, f in documents[i][0].items():
                        if w not in query_words:
                            terms[w] += idf(w) * f
                weights = {w: 1.0 for w in set(query_words)}
                weights.update({w: prf_weight for w, _ in terms.most_common(prf_terms)})
                keyword = bm25(weights, pairs)
            semantic_list = list(np.argsort(-cosine)[:depth])
            keyword_list = [i for i in np.argsort(-keyword)[:depth] if keyword[i] > 0]
            s_norm = dict(zip(semantic_list, scale([cosine[i] for i in semantic_list], semantic_floor)))
            k_norm = dict(zip(keyword_list, scale([keyword[i] for i in keyword_list], keyword_floor)))
            base = {i: semantic_weight * s_norm.get(i, 0.0) + (1 - semantic_weight) * k_norm.get(i, 0.0)
                    for i in set(semantic_list) | set(keyword_list)}
            # Session neighbours: a share of the best neighbour's relevance; neighbours no list
            # found join with a share of theirs.
            final = {}
            for i, r in base.items():
                near = [decay ** (abs(j - i) - 1) * base.get(j, 0.0)
                        for j in range(max(0, i - reach), min(n, i + reach + 1))
                        if j != i and session[j] == session[i]]
                final[i] = (r + neighbour_weight * max(near, default=0.0)) / (1 + neighbour_weight)
            for i, r in base.items():
                for j in range(max(0, i - reach), min(n, i + reach + 1)):
                    if j not in base and session[j] == session[i]:
                        inherited = neighbour_weight * decay ** (abs(j - i) - 1) * r / (1 + neighbour_weight)
                        final[j] = max(final.get(j, 0.0), inherited)
            if session_prior and with_sessions:
                # A session's best relevance lifts its other turns a little.
                best = collections.defaultdict(float)
                for i, r in base.items():
                    best[session[i]] = max(best[session[i]], r)
                final = {i: (r + session_prior * best[session[i]]) / (1 + session_prior) for i, r in final.items()}
            if alike_top:
                gained = {}
                for i in [i for i, _ in sorted(final.items(), key=lambda x: -x[1])[:alike_top]]:
                    likeness = stored @ stored[i]
                    mine = [j for j in range(n) if session[j] == session[i]
                            and (alike_other_sessions and with_sessions or abs(j - i) <= reach)]
                    likeness[mine] = -1.0  # itself included
                    for j in np.argsort(-likeness)[:alike_m]:
                        if likeness[j] > 0:
                            g = alike_weight * final[i] * float(likeness[j])
                            gained[j] = max(gained.get(j, 0.0), g)
                for j, g in gained.items():
                    final[j] = max(final.get(j, 0.0), g)
            if rerank:
                final = second_stage(final, c["turn_tokens"], c["query_tokens"][qi], rerank, rerank_weight,
                                     rerank_query, rerank_both_ways, sketch, rerank_near, session,
                                     rerank_near_turns, rerank_near_far)
            order = [i for i, _ in sorted(final.items(), key=lambda x: -x[1])]
            if mmr:
                # Maximal marginal relevance over the first `mmr_depth`: each next pick weighs
                # its relevance against its likeness to what is already picked.
                head, tail = order[:mmr_depth], order[mmr_depth:]
                rel = dict(zip(head, min_max([final[i] for i in head])))
                picked, likeness = [], {i: 0.0 for i in head}
                while head:
                    best = max(head, key=lambda i: (1 - mmr) * rel[i] - mmr * likeness[i])
                    head.remove(best)
                    picked.append(best)
                    for i in head:
                        likeness[i] = max(likeness[i], float(stored[i] @ stored[best]))
                order = picked + tail
            if session_cap:
                # At most `session_cap` of one session (or of one run of adjacent turns) in the top 10.
                top, rest, seen = [], [], collections.Counter()
                for i in order:
                    key = session[i] if with_sessions else i // 20
                    if len(top) < 10 and seen[key] < session_cap:
                        top.append(i)
                        seen[key] += 1
                    else:
                        rest.append(i)
                order = top + rest
            ranked = [c["ids"][i] for i in order]
            if report is not None:  # every question's final order, for looking at what is missed
                report.append((c, question, ranked))
            evidence = set(question["evidence"])
            for k in (5, 10, 25, 50):
                hit = len(evidence & set(ranked[:k])) / len(evidence)
                recall[(k, "all")].append(hit)
                recall[(k, question["category"])].append(hit)
    # A category without questions (a single conversation's run) reads as nan.
    mean = lambda key: sum(recall[key]) / len(recall[key]) if recall[key] else float("nan")
    return (" ".join(f"{mean((k, 'all')):.3f}" for k in (5, 10, 25, 50)) + " | R@10 "
            + " ".join(f"{cat}:{mean((10, cat)):.3f}" for cat in (1, 2, 3, 4)))


def second_stage(final, turn_tokens, query_tokens, k, weight, query_kind, both_ways, sketch=None, near=0.0,
                 session=None, near_turns=1, near_far=None):
    """`final` with its `k` best reordered by late interaction, inside the range they span;
    with `near`, each turn read with its session's turns up to `near_turns` each side at
    that share (`near_far` for those two away)."""
    top = [i for i, _ in sorted(final.items(), key=lambda x: -x[1])[:k]]
    vectors, pieces = query_tokens
    keep = {
        "content": lambda t: t.isalnum() and t not in STOP,
        "words": lambda t: t.isalnum(),
        "all": lambda t: True,
    }[query_kind]
    rows = [j for j, t in enumerate(pieces) if keep(t)] or list(range(len(pieces)))
    read = sketch or (lambda v: v.astype(np.float32))
    query = read(vectors[rows])
    measures = []
    for i in top:
        similarity = query @ read(turn_tokens[i][0]).T
        for d in range(1, near_turns + 1) if near else ():
            share = near if d == 1 or near_far is None else near_far
            for j in (i - d, i + d):
                if 0 <= j < len(turn_tokens) and session[j] == session[i]:
                    similarity = np.concatenate([similarity, share * (query @ read(turn_tokens[j][0]).T)], axis=1)
        m = similarity.max(1).mean()
        measures.append(0.5 * m + 0.5 * similarity.max(0).mean() if both_ways else m)
    first = [final[i] for i in top]
    lo, hi = min(first), max(first)
    scale = lambda v: [(x - min(v)) / (max(v) - min(v)) if max(v) > min(v) else 1.0 for x in v]
    for i, f, m in zip(top, scale(first), scale(measures)):
        final[i] = lo + (hi - lo) * ((1 - weight) * f + weight * m)
    return final


def main():
    conversations = load(sys.argv[1])
    print("variant".ljust(30), "R@5 R@10 R@25 R@50 | R@10 by category")
    for variant in sys.argv[2:] or [""]:
        print((variant or "defaults").ljust(30), run(conversations, **eval(f"dict({variant})")), flush=True)


if __name__ == "__main__":
    main()
