"""Prompt templates: what the policy sees, and the reference completion warm start imitates.
`reasoning` follows MaxText's GSM8K GRPO recipe (working between reasoning tags, then <answer>);
`answer` asks for the <answer> block only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlexp.base.errors import UserError

ANSWER_INSTRUCTION = "Answer between <answer> and </answer>."
# MaxText grpo_llama3_1_8b_demo (GSM8K): the system prompt that defines the format rewards.
REASONING_INSTRUCTION = ("You are given a problem. Think about the problem and provide your "
                         "working out. Place it between <{tag}> and </{tag}>. Then, provide your "
                         "final answer between <answer> and </answer>.")


@dataclass(frozen=True)
class PromptTemplate:
    template: str = "answer"  # reasoning | answer: the tags asked for (and format rewards check)
    reasoning_tag: str = "reasoning"  # tag of the working out with template=reasoning (<think>)
    system_prompt: str | None = None  # instruction (chat: system message); None = the template's
    prompt: str | None = None  # user message with {question}; None = "{question}\n<instruction>\n"

    @classmethod
    def from_config(cls, d: Any) -> "PromptTemplate":
        """From a DatasetConfig: dataset.prompt_file is read here (UserError if unreadable)."""
        prompt = d.prompt
        if d.prompt_file is not None:
            try:
                prompt = Path(d.prompt_file).expanduser().read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UserError(f"dataset.prompt_file={d.prompt_file}: cannot read it "
                                f"({type(exc).__name__})") from None
        if prompt is not None and "{question}" not in prompt:
            key = "dataset.prompt_file" if d.prompt_file is not None else "dataset.prompt"
            raise UserError(f"{key}: the template has no {{question}} placeholder")
        return cls(template=d.template, reasoning_tag=d.reasoning_tag,
                   system_prompt=d.system_prompt, prompt=prompt)

    @property
    def instruction(self) -> str:
        if self.system_prompt is not None:
            return self.system_prompt
        if self.template == "reasoning":
            return REASONING_INSTRUCTION.format(tag=self.reasoning_tag)
        return ANSWER_INSTRUCTION

    def render(self, question: str, chat_tokenizer: Any | None = None) -> str:
        """The prompt string. With `chat_tokenizer` (an HF tokenizer) it is chat-formatted."""
        if chat_tokenizer is not None:
            user = self.prompt.replace("{question}", question) if self.prompt else question
            messages = [{"role": "user", "content": user}]
            if self.instruction:
                messages.insert(0, {"role": "system", "content": self.instruction})
            return chat_tokenizer.apply_chat_template(messages, tokenize=False,
                                                      add_generation_prompt=True)
        if self.prompt is not None:  # str.replace: other braces in the file stay as written
            return self.prompt.replace("{question}", question)
        return f"{question}\n{self.instruction}\n" if self.instruction else f"{question}\n"

    def reference(self, answer: str, reasoning: str) -> str:
        """The completion a perfect policy writes: the target of the warm-start stage."""
        if self.template == "reasoning":
            t = self.reasoning_tag
            return f"<{t}>{reasoning}</{t}>\n<answer>{answer}</answer>"
        return f"<answer>{answer}</answer>"


def shortest_answer(template: str, reasoning_tag: str = "reasoning") -> str:
    """The shortest completion graded correct: the template's tags around a one-character answer."""
    return PromptTemplate(template=template, reasoning_tag=reasoning_tag).reference("0", "")
