"""A tiny llama-architecture model written with the `gguf` package: random weights, no download.

Its vocabulary is GPT-2's byte-level one (every byte a token, so any prompt tokenizes and any JSON schema
grammar can be met) plus `SAME` and the chat-template markers. The output rows of the digits, the pairwise
letters and the JSON punctuation are scaled up, so replies often hold a score digit, though not always first
(`B~}5`): the positions where G-Eval scoring can go wrong. Real sampling, real logprobs, real grammars.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

EMBEDDING = 64
LAYERS = 2
HEADS = 4
FEED_FORWARD = 128
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["S A", "SA M", "SAM E"]  # so "SAME" is one token, as in real vocabularies
FAVOURED = list("12345") + ["A", "B", "SAME", "{", "}", "~"]
END_BIAS = 3.0  # how soon a reply ends (at the temperature llama-server defaults to)
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_tokens() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes, in byte order."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    )
    stand_in = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in stand_in:
            stand_in[b] = chr(256 + extra)
            extra += 1
    return [stand_in[b] for b in range(256)]


def constant_kept(weights: np.ndarray) -> np.ndarray:
    """A layer's output projection that leaves dimension 0 of the residual stream alone."""
    weights[0, :] = 0.0
    return weights


def write_tiny_model(path: Path, *, context_length: int, seed: int = 33) -> Path:
    tokens = byte_tokens() + ["SA", "SAM", "SAME"] + SPECIAL
    types = [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIAL)) + [gguf.TokenType.CONTROL] * len(SPECIAL)
    vocab = len(tokens)
    rng = np.random.default_rng(seed)

    def weights(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("concord-tiny-test-model")
    writer.add_context_length(context_length)
    writer.add_embedding_length(EMBEDDING)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(EMBEDDING // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    # Dimension 0 of the residual stream is a constant (no layer writes to it), so column 0 of the output
    # weights acts as a bias per token: control bytes and bytes outside ASCII are never written (replies
    # stay text whose logprob tokens spell it), the favoured tokens come often, the end of turn now and then.
    embedding = weights(vocab, EMBEDDING, scale=1.0)
    embedding[:, 0] = 4.0
    output = weights(vocab, EMBEDDING)
    output[:, 0] = 0.0
    for byte in [*range(0x20), *range(0x7F, 0x100)]:
        if byte != 0x0A:
            output[byte, 0] = -30.0
    stand_in = dict(zip(range(256), byte_tokens(), strict=True))
    for text in FAVOURED:
        token = tokens.index("".join(stand_in[b] for b in text.encode()))
        output[token] *= 3.0
        output[token, 0] = 1.5 if text.isdigit() else 0.5
    output[tokens.index("<|im_end|>"), 0] = END_BIAS
    writer.add_tensor("token_embd.weight", embedding)
    writer.add_tensor("output_norm.weight", np.ones(EMBEDDING, dtype=np.float32))
    writer.add_tensor("output.weight", output)
    for n in range(LAYERS):
        writer.add_tensor(f"blk.{n}.attn_norm.weight", np.ones(EMBEDDING, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v"):
            writer.add_tensor(f"blk.{n}.{name}.weight", weights(EMBEDDING, EMBEDDING))
        writer.add_tensor(f"blk.{n}.attn_output.weight", constant_kept(weights(EMBEDDING, EMBEDDING)))
        writer.add_tensor(f"blk.{n}.ffn_norm.weight", np.ones(EMBEDDING, dtype=np.float32))
        writer.add_tensor(f"blk.{n}.ffn_gate.weight", weights(FEED_FORWARD, EMBEDDING))
        writer.add_tensor(f"blk.{n}.ffn_up.weight", weights(FEED_FORWARD, EMBEDDING))
        writer.add_tensor(f"blk.{n}.ffn_down.weight", constant_kept(weights(EMBEDDING, FEED_FORWARD)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
