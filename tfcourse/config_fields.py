"""One vocabulary for every model config: each field's name, meaning and default.

TransformerConfig, GPTConfig and EncoderOnlyConfig (tfcourse.models) use these names and only these
(tests/test_config_fields.py holds them to it). A field that switches the architecture has the same
default in every config: the paper's choice. The families differ through named configs
(`GPTConfig.gpt`, `GPTConfig.gpt2_small`, `GPTConfig.llama`, `EncoderOnlyConfig.bert`, ...), not through
defaults. Sizes (SIZES) are the exception: each config keeps a small default shape of its own.
"""

from __future__ import annotations

from typing import Any

REQUIRED = object()  # a field without a default (the vocabulary sizes)

# name -> (meaning, default shared by every config that has the field)
FIELDS: dict[str, tuple[str, Any]] = {
    # what the model reads and predicts
    "vocab_size": ("tokens the model reads and predicts (ids in [0, vocab_size))", REQUIRED),
    "src_vocab_size": ("source-language tokens (encoder-decoder)", REQUIRED),
    "tgt_vocab_size": ("target-language tokens, the ones the decoder predicts", REQUIRED),
    "n_classes": ("classes of a sequence classifier; None: a masked-token head over the vocabulary", None),
    "pad_id": ("the padding token, masked out of attention", 0),
    # sizes
    "max_len": ("the longest sequence: positions 0 .. max_len - 1", REQUIRED),
    "d_model": ("width of every vector between sub-layers (the residual stream)", REQUIRED),
    "n_heads": ("attention (query) heads; d_head = d_model / n_heads", REQUIRED),
    "n_layers": ("blocks (for the encoder-decoder: encoder layers, and as many decoder layers)", REQUIRED),
    "d_ff": ("FFN hidden width; None: 4 d_model, or 2/3 of it for SwiGLU (the same parameters)", None),
    # the block
    "n_kv_heads": ("key/value heads; None: n_heads (multi-head), fewer: grouped-query, 1: multi-query", None),
    "dropout": ("dropout on the embeddings, the attention weights and every sub-layer output", 0.1),
    "norm_first": ("False: post-LN, LN(x + F(x)), the paper; True: pre-LN, x + F(LN(x)) and a final norm", False),
    "norm": ('"layer" (LayerNorm: the paper, GPT-2, BERT) or "rms" (RMSNorm: LLaMA)', "layer"),
    "norm_eps": ("the epsilon inside the norm's square root", 1e-5),
    "activation": ('the FFN: "relu" (the paper), "gelu" (BERT), "gelu_tanh" (GPT-2), "swiglu" (LLaMA)', "relu"),
    "bias": ("biases in the attention projections (the paper has them; LLaMA drops them)", True),
    "fused_attention": ("torch's fused attention kernel: the same result, faster, no weights returned", False),
    # positions and embeddings
    "positional": ('"sinusoidal" (the paper), "learned" (GPT-2, BERT), "rope" (LLaMA) or "none"', "sinusoidal"),
    "rope_base": ("RoPE's base: pair i turns by position * base^(-2i / d_head)", 10000.0),
    "rope_layout": ('the dimensions RoPE pairs: "half" (i, i + d/2: Hugging Face) or "interleaved" (2i, 2i+1)', "half"),
    "scale_embedding": ("multiply token vectors by sqrt(d_model) (the paper; GPT-2 does not)", True),
    "share_embeddings": ("one token table for source and target (needs one vocabulary)", False),
    "tie_weights": ("the output layer reuses the (target) token table (paper, section 3.4)", False),
}

# The fields whose defaults belong to each config's shape, not to the vocabulary.
SIZES = ("max_len", "d_model", "n_heads", "n_layers")

NORMS = ("layer", "rms")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swiglu")
POSITIONALS = ("sinusoidal", "learned", "rope", "none")


def check_choices(config: Any) -> None:
    """A ValueError naming the field for an option outside its choices (only the fields the config has)."""
    for name, allowed in (("norm", NORMS), ("activation", ACTIVATIONS), ("positional", POSITIONALS)):
        value = getattr(config, name, allowed[0])
        if value not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


__all__ = ["FIELDS", "SIZES", "REQUIRED", "NORMS", "ACTIVATIONS", "POSITIONALS", "check_choices"]
