"""Build a tiny Llama with random weights and a locally trained tokenizer, for the vLLM CPU server.

No model can be downloaded here, and the live tests need only a genuine engine, not sensible text:
2 layers, hidden size 128, a byte-level BPE tokenizer trained on a few paragraphs written below.
Everything is seeded, so two builds give the same files.

Usage: python make_tiny_model.py OUTPUT_DIR   (run with the vLLM venv's python: it has
torch, transformers and tokenizers)
"""

from __future__ import annotations

import sys
from pathlib import Path

SEED = 1234
VOCAB_SIZE = 1024
# Long enough for the KV-pressure scenario's prompts plus their completions.
MAX_POSITIONS = 4096
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]

TRAINING_TEXT = """\
A cluster schedules pods onto nodes, and each node reports its capacity and its allocatable resources.
When a pod asks for more GPUs than any node can give, the scheduler leaves it pending and records an event.
A Ray head starts the autoscaler, and worker groups join it; actors wait until their resources are free.
The inference engine keeps a cache of keys and values for every running sequence, block by block.
When the cache is full, the scheduler preempts a sequence and computes it again later.
A server that limits the number of sequences per step queues the rest, even when memory is free.
Metrics are scraped over plain HTTP: counters only grow, gauges move up and down, histograms count buckets.
Tokens per second, time to first token and time per output token describe how the server feels to a user.
The quick brown fox jumps over the lazy dog while the engineer reads the logs one line at a time.
Numbers such as 0 1 2 3 4 5 6 7 8 9 10 100 1000 appear in prompts, answers and configuration flags.
"""


def train_tokenizer(out_dir: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TRAINING_TEXT.splitlines(), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=MAX_POSITIONS,
    )
    wrapped.save_pretrained(out_dir)
    return tokenizer.get_vocab_size()


def build_model(out_dir: Path, vocab_size: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=SPECIAL_TOKENS.index("<s>"),
        eos_token_id=SPECIAL_TOKENS.index("</s>"),
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out_dir, safe_serialization=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = Path(argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab_size = train_tokenizer(out_dir)
    build_model(out_dir, vocab_size)
    print(f"tiny Llama (vocab {vocab_size}) written to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
