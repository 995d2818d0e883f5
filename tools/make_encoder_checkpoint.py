#!/usr/bin/env python3
"""Writes a small random BERT-family checkpoint in the exact Hugging Face layout, for the encoder
backend's reference tests and benchmarks (issue 19).

The weights come from transformers itself (BertModel, RobertaModel, DistilBertModel, MPNetModel,
ModernBertModel, Qwen3Model,
*ForSequenceClassification, initialised from a seed, saved with save_pretrained: config.json +
model.safetensors, names and prefixes exactly as Hugging Face writes them). Optionally a
sentence-transformers head:
modules.json, 1_Pooling/config.json, sentence_bert_config.json and a Normalize module.

    make_encoder_checkpoint.py OUT --arch bert|roberta|distilbert|mpnet|modernbert|qwen3
        [--classifier N]
        [--pooling mean,cls] [--normalize] [--dtype f32|f16|bf16] [--hidden 32 --layers 2 --heads 4 ...]

Used by tests/integration/encoder_reference_test.py and bench/encoder_bench.py; needs the pinned
torch and transformers (tests/python-requirements.txt).
"""
import argparse
import json
import os

import torch
import transformers

POOLING_KEYS = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
    "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
    "weightedmean": "pooling_mode_weightedmean_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}


def build(args):
    torch.manual_seed(args.seed)
    common = dict(hidden_size=args.hidden, num_hidden_layers=args.layers,
                  num_attention_heads=args.heads, intermediate_size=args.intermediate,
                  hidden_act=args.act, vocab_size=args.vocab,
                  max_position_embeddings=args.max_positions, layer_norm_eps=args.eps,
                  initializer_range=args.init_range)
    if args.arch == "bert":
        config = transformers.BertConfig(type_vocab_size=args.type_vocab, **common)
        base, classifier = transformers.BertModel, transformers.BertForSequenceClassification
    elif args.arch == "distilbert":
        # DistilBertConfig's own keys (dim, n_layers...); LayerNorm eps is fixed at 1e-12 in
        # modeling_distilbert.py and no token types.
        config = transformers.DistilBertConfig(
            dim=args.hidden, n_layers=args.layers, n_heads=args.heads, hidden_dim=args.intermediate,
            activation=args.act, vocab_size=args.vocab, max_position_embeddings=args.max_positions,
            initializer_range=args.init_range)
        base = transformers.DistilBertModel
        classifier = transformers.DistilBertForSequenceClassification
    elif args.arch == "mpnet":
        # all-mpnet-base-v2's architecture: RoBERTa's positions (padding index 1), no token
        # types, the relative position bias (32 buckets).
        config = transformers.MPNetConfig(pad_token_id=1, relative_attention_num_buckets=32,
                                          **common)
        config.max_position_embeddings = args.max_positions + 2
        base = transformers.MPNetModel
        classifier = transformers.MPNetForSequenceClassification
    elif args.arch == "modernbert":
        # ModernBertConfig's own keys (hidden_activation, norm_eps...): rotary positions (no
        # table), pre-norm GeGLU layers, every global_attn_every_n-th layer global and the others
        # attending within local_attention / 2; special ids inside the small vocabulary.
        config = transformers.ModernBertConfig(
            hidden_size=args.hidden, num_hidden_layers=args.layers,
            num_attention_heads=args.heads, intermediate_size=args.intermediate,
            hidden_activation=args.act, vocab_size=args.vocab,
            max_position_embeddings=args.max_positions, norm_eps=1e-5,
            initializer_range=args.init_range, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            cls_token_id=1, sep_token_id=2, local_attention=args.local_attention,
            global_attn_every_n_layers=args.global_every, norm_bias=args.biases,
            attention_bias=args.biases, mlp_bias=args.biases, classifier_bias=args.biases,
            classifier_pooling=args.classifier_pooling, classifier_activation=args.act,
            reference_compile=False)
        base = transformers.ModernBertModel
        classifier = transformers.ModernBertForSequenceClassification
    elif args.arch == "qwen3":
        # Qwen3-Embedding's architecture (Qwen3Config's own keys: num_key_value_heads, head_dim,
        # rms_norm_eps, rope_theta): a decoder with grouped-query attention, an explicit head
        # size, RMSNorm, rotary positions, SwiGLU; no pad token of its own.
        config = transformers.Qwen3Config(
            hidden_size=args.hidden, num_hidden_layers=args.layers,
            num_attention_heads=args.heads, num_key_value_heads=args.kv_heads or args.heads,
            head_dim=args.head_dim or args.hidden // args.heads,
            intermediate_size=args.intermediate, hidden_act="silu", vocab_size=args.vocab,
            max_position_embeddings=args.max_positions, rms_norm_eps=1e-6,
            rope_theta=args.rope_theta, attention_bias=args.biases, use_sliding_window=False,
            tie_word_embeddings=False, initializer_range=args.init_range,
            pad_token_id=0 if args.classifier else None)  # the score head's last non-pad token
        base = transformers.Qwen3Model
        classifier = transformers.Qwen3ForSequenceClassification
    else:
        config = transformers.RobertaConfig(type_vocab_size=1, pad_token_id=1, **common)
        config.max_position_embeddings = args.max_positions + 2
        base, classifier = transformers.RobertaModel, transformers.RobertaForSequenceClassification
    if args.classifier:
        config.num_labels = args.classifier
        config.id2label = {i: f"LABEL_{i}" for i in range(args.classifier)}
        config.label2id = {v: k for k, v in config.id2label.items()}
        model = classifier(config)
    elif args.arch in ("distilbert", "modernbert", "qwen3"):
        model = base(config)  # no pooler
    else:
        model = base(config, add_pooling_layer=not args.no_pooler)
    # Random LayerNorm parameters too (transformers initialises them to 1 and 0), so that a
    # swapped gamma/beta or a missing one cannot pass.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or (
                    args.arch in ("modernbert", "qwen3") and "norm" in name):
                param.add_(torch.randn_like(param) * 0.1)
            elif args.arch in ("modernbert", "qwen3") and name.endswith(".bias"):
                # ModernBERT and Qwen3 initialise their biases to 0: random ones, so that each is
                # read.
                param.add_(torch.randn_like(param) * 0.1)
    model.eval()
    return model


def write_sentence_transformers(out, args):
    modes = [m for m in args.pooling.split(",") if m]
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    if modes:
        os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
        pooling = {"word_embedding_dimension": args.hidden}
        for mode, key in POOLING_KEYS.items():
            pooling[key] = mode in modes
        pooling["include_prompt"] = True
        with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
            json.dump(pooling, f, indent=2)
        modules.append({"idx": 1, "name": "1", "path": "1_Pooling",
                        "type": "sentence_transformers.models.Pooling"})
    if args.normalize:
        # The empty 2_Normalize/ folder does not survive git: modules.json alone says Normalize.
        modules.append({"idx": len(modules), "name": str(len(modules)), "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    if modes or args.normalize:
        with open(os.path.join(out, "modules.json"), "w") as f:
            json.dump(modules, f, indent=2)
        with open(os.path.join(out, "sentence_bert_config.json"), "w") as f:
            json.dump({"max_seq_length": args.max_positions, "do_lower_case": False}, f)


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--arch", default="bert",
                        choices=["bert", "roberta", "distilbert", "mpnet", "modernbert", "qwen3"])
    parser.add_argument("--classifier", type=int, default=0, help="labels of a classification head")
    parser.add_argument("--no-pooler", action="store_true", help="base model without pooler.dense")
    parser.add_argument("--pooling", default="",
                        help="comma-separated: cls,max,mean,mean_sqrt_len,weightedmean,lasttoken")
    parser.add_argument("--normalize", action="store_true")
    parser.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=100)
    parser.add_argument("--type-vocab", type=int, default=2)
    parser.add_argument("--max-positions", type=int, default=64)
    parser.add_argument("--act", default="gelu")
    parser.add_argument("--eps", type=float, default=1e-12)
    # ModernBERT only.
    parser.add_argument("--local-attention", type=int, default=16,
                        help="ModernBERT: the sliding window (keys within half of it each side)")
    parser.add_argument("--global-every", type=int, default=3,
                        help="ModernBERT: global_attn_every_n_layers")
    parser.add_argument("--biases", action="store_true",
                        help="ModernBERT: attention, MLP, LayerNorm and head biases; Qwen3: "
                        "attention_bias (q/k/v/o biases)")
    # Qwen3 only.
    parser.add_argument("--kv-heads", type=int, default=0,
                        help="Qwen3: num_key_value_heads (0: --heads)")
    parser.add_argument("--head-dim", type=int, default=0,
                        help="Qwen3: head_dim (0: hidden / heads)")
    parser.add_argument("--rope-theta", type=float, default=10000.0, help="Qwen3: rope_theta")
    parser.add_argument("--classifier-pooling", choices=["cls", "mean"], default="cls")
    parser.add_argument("--init-range", type=float, default=0.2,
                        help="weight scale (larger than HF's 0.02 so that every layer matters)")
    return parser


def write_checkpoint(out, **options):
    """The command line's work as a function: write_checkpoint(dir, arch="roberta", classifier=2)."""
    args = make_parser().parse_args([out])
    for key, value in options.items():
        if not hasattr(args, key):
            raise TypeError(f"unknown option {key}")
        setattr(args, key, value)
    write(args)


def write(args):
    model = build(args)
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    model.to(dtype).save_pretrained(args.out, safe_serialization=True)
    write_sentence_transformers(args.out, args)


def main():
    write(make_parser().parse_args())


if __name__ == "__main__":
    main()
