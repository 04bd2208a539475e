"""Tiny Hugging Face transformers built from config objects (random weights, nothing downloaded), exported to
ONNX the usual way: the TorchScript exporter, a keyword wrapper, dynamic batch and sequence axes."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

#: hidden size, heads, layers, feed-forward width of every tiny model
HIDDEN, HEADS, LAYERS, FFN, VOCAB = 32, 2, 2, 64, 100
IMAGE, PATCH = 32, 8


def _config(name: str, full_size: bool = False):
    import transformers as tf

    if full_size:  # the library's defaults are the base models: BERT-base, GPT-2 small, ViT-base/16 at 224, ...
        defaults = {"bert": tf.BertConfig, "gpt2": tf.GPT2Config, "t5_encoder": tf.T5Config,
                    "distilbert": tf.DistilBertConfig, "vit": tf.ViTConfig}  # fmt: skip
        return defaults[name]()
    if name == "bert":
        return tf.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                             num_attention_heads=HEADS, intermediate_size=FFN, max_position_embeddings=512)  # fmt: skip
    if name == "gpt2":
        return tf.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=FFN,
                             n_positions=512)  # fmt: skip
    if name == "t5_encoder":
        return tf.T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN, num_layers=LAYERS,
                           num_heads=HEADS)  # fmt: skip
    if name == "distilbert":
        return tf.DistilBertConfig(vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FFN,
                                   max_position_embeddings=512)  # fmt: skip
    if name == "vit":
        return tf.ViTConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                            intermediate_size=FFN, image_size=IMAGE, patch_size=PATCH, num_channels=3)  # fmt: skip
    raise KeyError(name)


def _model(name: str, full_size: bool = False) -> nn.Module:
    import transformers as tf

    config = _config(name, full_size)
    classes = {"bert": tf.BertModel, "gpt2": tf.GPT2Model, "t5_encoder": tf.T5EncoderModel,
               "distilbert": tf.DistilBertModel, "vit": tf.ViTModel}  # fmt: skip
    return classes[name](config).eval()


class KeywordCall(nn.Module):
    """Calls the model with keywords, as its users do, and returns the last hidden state."""

    def __init__(self, model: nn.Module, keyword: str) -> None:
        super().__init__()
        self.model, self.keyword = model, keyword

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        kwargs = {self.keyword: x}
        if mask is not None:
            kwargs["attention_mask"] = mask
        return self.model(**kwargs).last_hidden_state


NAMES = ("bert", "gpt2", "t5_encoder", "distilbert", "vit")


def export_transformer(name: str, path: Path, full_size: bool = False) -> Path:
    """``name`` exported with dynamic ``batch`` and ``seq`` axes (ViT: dynamic batch; its sequence follows
    from the image); tiny, or with ``full_size`` at the library's default configuration (random weights)."""
    torch.manual_seed(0)
    model = _model(name, full_size)
    if name == "vit":
        image = model.config.image_size
        wrapper, args = KeywordCall(model, "pixel_values"), (torch.randn(2, 3, image, image),)
        names, axes = ["pixel_values"], {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}}
    else:
        ids = torch.randint(0, VOCAB, (2, 8))
        wrapper, args = KeywordCall(model, "input_ids"), (ids, torch.ones(2, 8, dtype=torch.int64))
        names = ["input_ids", "attention_mask"]
        axes = {n: {0: "batch", 1: "seq"} for n in [*names, "last_hidden_state"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapper, args, str(path), input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes=axes, dynamo=False, opset_version=17)  # fmt: skip
    return path
