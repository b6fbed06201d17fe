"""tfcourse: the reference Transformer that the course's exercises are checked against.

Three layers, each importing only the ones above it.

1. The model, tokens -> logits, read in the order data flows:

    tokenizers.py  text -> token ids (characters, words, byte-level BPE)
    embedding.py   ids -> vectors x sqrt(d_model) + positional encoding
    attention.py   scaled dot-product attention, masks, multi-head attention, KV cache
    ffn.py         position-wise feed-forward network (and the worked example's weights)
    blocks.py      residual + LayerNorm; encoder and decoder layers and stacks
    output.py      linear -> softmax; stable log-softmax and cross-entropy
    models.py      encoder-decoder Transformer, GPT (one decoder-only stack: the 2017 block, GPT-2, LLaMA-style),
                   encoder-only (BERT-style); table 3-1's shapes
    config_fields.py  the one vocabulary of the model configs: each field's name, meaning and default
    decoding.py    greedy, temperature, top-k, top-p, beam search
    rnn.py         the recurrent network the Transformer replaced (lesson 10)
    modern.py      the modern block's parts: RMSNorm, SwiGLU, RoPE (both pair layouts), grouped-query attention (lesson 11)
    pretrained.py  GPT-2's checkpoint layout -> the course GPT (Conv1D, fused c_attn, tied head) (lesson 12)
    validation.py  the input checks every module shares
    cache.py       where downloads and made-once files are kept (~/.cache/tfcourse); no torch

2. Data and training: `tfcourse.data` (Tiny Shakespeare, batches, the EN->FR corpus,
   BERT's masked-token batches) and
   `tfcourse.training` (the training loop, the recipes, the end-to-end runs).

3. The course machinery: `tfcourse.course` (lesson setup, notebook import, plots, run-solutions,
   grading, benchmarks, the `tfcourse` command) and `tfcourse.checks` (the exercise checks).
   Layers 1 and 2 never import layer 3: the model works without Jupyter or nbgrader.
"""

__version__ = "0.1.0"
