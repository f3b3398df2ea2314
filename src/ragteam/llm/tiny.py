"""A tiny random Llama and a tokenizer built in code: a real Hugging Face model folder for fast tests.

Nothing is downloaded. The tokenizer is a byte-level BPE (any text round-trips) trained on a short built-in
text, with ChatML special tokens and a ChatML chat template (the same format as SmolLM2-Instruct). The model is
a 2-layer LlamaForCausalLM with random weights from a fixed seed, so every build is identical. It writes
gibberish, but it has every property the code paths need: chat template, padding, generation, log-probs, LoRA.
"""

from __future__ import annotations

from pathlib import Path

from ragteam.llm.cache import build_once, models_dir

SEED = 1234
CONTEXT = 8192  # as SmolLM2; the built-in BPE is a poor compressor, so real prompts run long
VERSION = 2  # bump when the build changes: the cached folder is named after it
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# ChatML, as SmolLM2-Instruct spells it; `{% generation %}` marks assistant text for completion-only SFT.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_TRAINING_TEXT = """
Question: Which city is the capital of France? Answer: Paris is the capital of France.
Question: Who wrote the novel? Answer: The novel was written by an author born in the city.
You are a helpful assistant. Read the documents and answer the question with a short answer.
The retriever returns passages; the router decides whether to retrieve, to plan, or to answer directly.
Documents: [1] The river flows through the valley. [2] The film was released in the year after the war.
Search query: population of the largest city in the country where the river rises.
The answer is yes. The answer is no. The answer is unknown. Both films were directed by the same person.
Thought: I need more information. Action: search. Observation: the passage says the team won the cup.
Select the relevant documents by their ids, then write the final answer in a few words.
""".strip()


def _build_tokenizer():
    """A byte-level BPE tokenizer with ChatML specials, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_TRAINING_TEXT.splitlines() * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHATML_TEMPLATE,
        model_max_length=CONTEXT,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def _build(out: Path) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = _build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        initializer_range=0.2,  # peaked next-token distributions: fewer near-ties under greedy decoding
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, do_sample=False
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def tiny_model_dir(path: Path | None = None) -> Path:
    """Build (once) and return the folder of the tiny model: `path`, or `$RAGTEAM_HOME/models/tiny-v<VERSION>`."""
    folder = Path(path) if path is not None else models_dir() / f"tiny-v{VERSION}"
    folder, _ = build_once(folder, _build)
    return folder
