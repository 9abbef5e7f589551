"""transformers' view of a GGUF file, for the tests that compare journey with it.

transformers reads a GGUF file itself: gguf-py dequantizes the tensors, transformers renames them
and un-permutes Q/K into LlamaForCausalLM, and builds a fast (Rust `tokenizers`) tokenizer from
tokenizer.ggml.tokens / merges, with the chat template from tokenizer.chat_template.

One gap, corrected here: its converter gives every "gpt2"-model GGUF the plain GPT-2 ByteLevel
pre-tokenizer and ignores tokenizer.ggml.pre. For pre "smollm" (SmolLM, SmolLM2) that is not the
model's tokenizer: SmolLM2's tokenizer.json pre-tokenizes with Sequence[Digits(individual_digits),
ByteLevel(use_regex)], and llama.cpp's "smollm" type (which llama.cpp's convert_hf_to_gguf_update.py
chose because it reproduces that tokenizer) isolates every digit before the GPT-2 regex as well.
The difference shows on spaces before digits ("  47": " ", " 4", "7" against "  ", "4", "7").
"""
from gguf import GGUFReader
from tokenizers import pre_tokenizers

# tokenizer.ggml.pre -> the Hugging Face pre-tokenizer of the model it names (the ones transformers gets wrong)
PRE_TOKENIZERS = {
    "smollm": lambda: pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
}


def tokenizer_for_gguf(model_dir, gguf_file):
    """transformers' tokenizer for the GGUF file, with the pre-tokenizer its tokenizer.ggml.pre names."""
    import os
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(model_dir, gguf_file=gguf_file)
    reader = GGUFReader(os.path.join(model_dir, gguf_file))
    field = reader.fields.get("tokenizer.ggml.pre")
    pre = field.contents() if field is not None else ""
    if pre in PRE_TOKENIZERS:
        tokenizer.backend_tokenizer.pre_tokenizer = PRE_TOKENIZERS[pre]()
    return tokenizer
