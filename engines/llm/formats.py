"""The LLM's weights formats and the activation dtype each runs with by default (torch-free,
for the server's argument parsing; the quantized linears are in ``quant.py``).

Dense weights are the activations' dtype. The quantized formats run in either dtype (their
kernels take bfloat16 inputs either way) and default to float32: on a CPU without native
bfloat16 (AVX2) a bfloat16 model emulates every other op.
"""

ACTIVATIONS = {"fp32": "float32", "bf16": "bfloat16", "int8": "float32", "int4": "float32"}
WEIGHT_FORMATS = tuple(ACTIVATIONS)
DENSE_FORMATS = {"fp32": "float32", "bf16": "bfloat16"}
QUANTIZED_FORMATS = tuple(f for f in WEIGHT_FORMATS if f not in DENSE_FORMATS)
