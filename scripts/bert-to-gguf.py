#!/usr/bin/env python3
"""scripts/bert-to-gguf.py: a sentence-transformers BERT model (safetensors + tokenizer.json) to a GGUF
file that llama.cpp's llama-server serves on /v1/embeddings, with numpy and llama.cpp's own gguf-py only.

llama.cpp's convert_hf_to_gguf.py does the same but imports torch and transformers (gigabytes from
PyPI); this writes what its BertModel writes for a WordPiece model: the BERT hyper-parameters,
non-causal attention, the pooling of the model's 1_Pooling/config.json, the vocabulary in llama.cpp's
"phantom space" form (a word-initial piece gets a leading U+2581, a "##" continuation loses the "##"),
the special tokens, and the tensors under llama.cpp's names (weight matrices as f16; vectors and the
position and token-type embeddings as f32).

Usage: bert-to-gguf.py GGUF_PY_DIR MODEL_DIR OUT.gguf NAME
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np

SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
# Tensors llama.cpp's BERT graph does not use (convert_hf_to_gguf.py drops the same).
SKIPPED = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")
# Matrices llama.cpp adds to the token embeddings as they are, so kept in f32 (as the converter does).
F32_MATRICES = ("position_embd.", "token_types.")


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    data = path.read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = SAFETENSORS_DTYPES.get(info["dtype"])
        if dtype is None:
            sys.exit(f"bert-to-gguf: tensor {name} has dtype {info['dtype']}, which this script does not read")
        start, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data, dtype=dtype, count=(end - start) // np.dtype(dtype).itemsize,
                                      offset=base + start).reshape(info["shape"])
    return tensors


def pooling_type(gguf, model_dir: Path):
    modules = json.loads((model_dir / "modules.json").read_text(encoding="utf-8"))
    path = next((m["path"] for m in modules if m["type"].endswith("Pooling")), None)
    if path is None:
        sys.exit("bert-to-gguf: modules.json names no Pooling module")
    pooling = json.loads((model_dir / path / "config.json").read_text(encoding="utf-8"))
    if pooling.get("pooling_mode_mean_tokens"):
        return gguf.PoolingType.MEAN
    if pooling.get("pooling_mode_cls_token"):
        return gguf.PoolingType.CLS
    sys.exit(f"bert-to-gguf: unsupported pooling in {path}/config.json (mean or cls only)")


def vocabulary(gguf, model_dir: Path, vocab_size: int) -> tuple[list[str], list[int]]:
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    if tokenizer["model"]["type"] != "WordPiece":
        sys.exit(f"bert-to-gguf: tokenizer.json is {tokenizer['model']['type']}, not WordPiece")
    by_id = {i: tok for tok, i in tokenizer["model"]["vocab"].items()}
    special = {t["id"] for t in tokenizer.get("added_tokens", []) if t.get("special")}
    tokens, types = [], []
    for i in range(vocab_size):
        tok = by_id.get(i)
        if tok is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in special:
            tokens.append(tok)
            types.append(gguf.TokenType.CONTROL)
        else:
            tokens.append(tok[2:] if tok.startswith("##") else "\u2581" + tok)
            types.append(gguf.TokenType.NORMAL)
    return tokens, types


def main() -> None:
    if len(sys.argv) != 5:
        sys.exit("usage: bert-to-gguf.py GGUF_PY_DIR MODEL_DIR OUT.gguf NAME")
    gguf_py, model_dir, out, name = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    sys.path.insert(0, str(gguf_py))
    import gguf

    hp = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if hp.get("architectures") != ["BertModel"]:
        sys.exit(f"bert-to-gguf: config.json's architectures is {hp.get('architectures')}, not [\"BertModel\"]")
    arch = gguf.MODEL_ARCH.BERT
    writer = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[arch])
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_block_count(hp["num_hidden_layers"])
    writer.add_context_length(hp["max_position_embeddings"])
    writer.add_embedding_length(hp["hidden_size"])
    writer.add_feed_forward_length(hp["intermediate_size"])
    writer.add_head_count(hp["num_attention_heads"])
    writer.add_layer_norm_eps(hp["layer_norm_eps"])
    writer.add_causal_attention(False)
    writer.add_pooling_type(pooling_type(gguf, model_dir))

    tokens, types = vocabulary(gguf, model_dir, hp["vocab_size"])
    writer.add_token_type_count(hp.get("type_vocab_size", 1))
    writer.add_tokenizer_model("bert")
    # The WordPiece tokenizer does its own pre-tokenization; llama.cpp reads no pre-tokenizer for it.
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(model_dir, n_vocab=len(tokens)).add_to_gguf(writer)

    names = gguf.get_tensor_name_map(arch, hp["num_hidden_layers"])
    for hf_name, tensor in read_safetensors(model_dir / "model.safetensors").items():
        hf_name = hf_name.removeprefix("bert.")
        if hf_name in SKIPPED:
            continue
        new_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if new_name is None:
            sys.exit(f"bert-to-gguf: no llama.cpp name for tensor {hf_name}")
        half = tensor.ndim > 1 and not new_name.startswith(F32_MATRICES)
        data = tensor.astype(np.float16 if half else np.float32)
        writer.add_tensor(new_name, data)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
