"""tfcourse: the reference Transformer that the course's exercises are checked against.

Read it in the order data flows, tokens -> logits:

    tokenizers.py  text -> token ids (characters, words, byte-level BPE)
    embedding.py   ids -> vectors x sqrt(d_model) + positional encoding
    attention.py   scaled dot-product attention, masks, multi-head attention, KV cache
    ffn.py         position-wise feed-forward network
    blocks.py      residual + LayerNorm; encoder and decoder layers and stacks
    output.py      linear -> softmax; stable log-softmax and cross-entropy
    models.py      encoder-decoder Transformer, GPT, encoder-only (BERT-style)
    decoding.py    greedy, temperature, top-k, top-p, beam search

and around the model: data.py (Tiny Shakespeare, batches, EN->FR corpus), train.py (the
training loop), plots.py, bench.py, cli.py; validation.py holds the shared input checks.
"""

__version__ = "0.1.0"
