"""The pipeline's stages, in order: lesson 00's map, every lesson's opening map (figures/maps.py) and
`data_flow_map` name them. A module of its own, so that a lesson's setup does not import the drawings."""

STAGES = {
    "tokens": "text → tokens → ids",
    "embedding": "embedding × √d_model + positional encoding",
    "attention": "attention",
    "ffn": "feed-forward network",
    "blocks": "N × block (residual + LayerNorm)",
    "output": "linear + softmax → next token",
    "training": "training",
}
