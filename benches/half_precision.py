#!/usr/bin/env python3
"""Half precision against full, for the stored embeddings (migration 34, docs/decisions.md).

For every LoCoMo question of the offline model's cache (`benches/locomo_sim.py` writes
target/locomo_sim.npz), the turns' cosine with both sides in float32, against both sides
rounded to float16 as a `halfvec` column and a query cast to `halfvec` hold them (pgvector
sums in float32): how far a cosine moves, and how much of each top 10 and top 50 stays.

    /tmp/sim/bin/python benches/half_precision.py target/locomo_sim.npz
"""
import sys

import numpy as np

d = np.load(sys.argv[1])
convs = sorted({k.split('/')[0] for k in d.files})
dcos, same10, same50, n, swaps = [], 0, 0, 0, 0
for c in convs:
    for kind in ('own', 'window'):
        docs = d[f'{c}/{kind}'].astype(np.float32)
        q = d[f'{c}/query'].astype(np.float32)
        full = q @ docs.T
        half = q.astype(np.float16).astype(np.float32) @ docs.astype(np.float16).astype(np.float32).T
        # pgvector's cosine distance normalises: 1 - dot / (|a||b|)
        qn = np.linalg.norm(q.astype(np.float16).astype(np.float32), axis=1)[:, None]
        dn = np.linalg.norm(docs.astype(np.float16).astype(np.float32), axis=1)[None, :]
        half = half / (qn * dn)
        full = full / (np.linalg.norm(q, axis=1)[:, None] * np.linalg.norm(docs, axis=1)[None, :])
        dcos.append(np.abs(half - full).ravel())
        for i in range(len(q)):
            f = np.argsort(-full[i]); h = np.argsort(-half[i])
            same10 += len(set(f[:10]) & set(h[:10])); same50 += len(set(f[:50]) & set(h[:50])); n += 1
            swaps += int(not np.array_equal(f[:10], h[:10]))
dcos = np.concatenate(dcos)
print(f"|dcos| mean {dcos.mean():.2e} p99 {np.quantile(dcos, .99):.2e} max {dcos.max():.2e}")
print(f"top-10 overlap {same10 / n:.3f} of 10, top-50 {same50 / n:.3f} of 50, top-10 order changed in {swaps}/{n} rankings")
