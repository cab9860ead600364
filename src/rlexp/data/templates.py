"""Prompt templates: what the policy sees, and the reference completion warm start imitates.

`reasoning` follows MaxText's GSM8K GRPO recipe (reasoning in <reasoning>, final number in
<answer>); `answer` asks for the <answer> block only (short completions for the tiny model).
Instruct checkpoints get the same text wrapped in their tokenizer's chat template.
"""

from __future__ import annotations

from typing import Any

# MaxText grpo_llama3_1_8b_demo (GSM8K): the system prompt that defines the format rewards.
REASONING_INSTRUCTION = (
    "You are given a problem. Think about the problem and provide your working out. "
    "Place it between <reasoning> and </reasoning>. Then, provide your final answer "
    "between <answer> and </answer>."
)
ANSWER_INSTRUCTION = "Answer between <answer> and </answer>."


def instruction(template: str) -> str:
    return REASONING_INSTRUCTION if template == "reasoning" else ANSWER_INSTRUCTION


def render_prompt(question: str, template: str, chat_tokenizer: Any | None = None) -> str:
    """The prompt string. With `chat_tokenizer` (an HF tokenizer) it is chat-formatted."""
    if chat_tokenizer is not None:
        messages = [{"role": "system", "content": instruction(template)},
                    {"role": "user", "content": question}]
        return chat_tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True)
    return f"{question}\n{instruction(template)}\n"


def reference_completion(answer: str, reasoning: str, template: str) -> str:
    """The completion a perfect policy writes: the target of the warm-start stage."""
    if template == "reasoning":
        return f"<reasoning>{reasoning}</reasoning>\n<answer>{answer}</answer>"
    return f"<answer>{answer}</answer>"
