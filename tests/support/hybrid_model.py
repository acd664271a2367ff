"""The embedded model behind a Qwen3-style chat template, in a folder named like a Qwen3 model, so Nalar treats
it as a hybrid model (the Think switch decides whether the template opens the think block)."""

from __future__ import annotations

from pathlib import Path

# Qwen3's own template, cut to the parts that decide the generation prompt.
QWEN3_STYLE_TEMPLATE = """{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""


def hybrid_model_folder(source: Path, root: Path) -> Path:
    """``root``/Qwen3-style-SmolLM2-135M: ``source``'s files linked, its chat template replaced."""
    folder = root / "Qwen3-style-SmolLM2-135M"
    folder.mkdir()
    for item in source.iterdir():
        if item.name != "chat_template.jinja":
            (folder / item.name).symlink_to(item)
    (folder / "chat_template.jinja").write_text(QWEN3_STYLE_TEMPLATE, encoding="utf-8")
    return folder
