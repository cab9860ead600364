"""TRL's GRPOTrainer on a given Hugging Face checkpoint and shape: seconds per GRPO step.

    python bench/peers/trl_grpo.py --model-dir DIR --prompts 8 --num-generations 4 \
        --prompt-length 128 --completion-length 128 [--steps 10 --warmup 2 --dtype bfloat16]

The peer for bench/accelerator.py --compare trl, which passes the checkpoint and shape rlexp
ran: prompts x num_generations completions per step (TRL's per_device_train_batch_size counts
completions), the same prompt and completion budgets, one policy update per step, sampling at
temperature 1, beta 0 unless --beta (no reference model), and a cheap string reward, so the
step is generation + update. Generation is TRL's default path
(transformers' generate; no vLLM). Prints one JSON line with step_s (median of the timed steps).
Needs torch, transformers, datasets and trl; without them it says so in one line and exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import sys
import time

NEEDS = ("torch", "transformers", "datasets", "trl")


def missing() -> list[str]:
    return [name for name in NEEDS if importlib.util.find_spec(name) is None]


def prompts_of_length(tokenizer, n: int, length: int) -> list[str]:
    """`n` distinct prompts of about `length` tokens (digits: one token each, or close)."""
    out = []
    for i in range(n):
        text = f"Add the numbers {i}: " + " ".join(str((i * 7 + k) % 10) for k in range(length))
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][: max(length - 1, 1)]
        out.append(tokenizer.decode(ids))
    return out


def main(argv: list[str]) -> int:
    lacking = missing()
    if lacking:
        print(f"trl_grpo: skipped, {', '.join(lacking)} not installed "
              f"(pip install torch transformers datasets trl)")
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--prompt-length", type=int, default=128)
    p.add_argument("--completion-length", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--beta", type=float, default=0.0)
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    args = p.parse_args(argv)

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(args.model_dir, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if args.dtype == "bfloat16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, torch_dtype=dtype,
                                                 local_files_only=True)
    total = args.warmup + args.steps
    rows = args.prompts * args.num_generations
    data = Dataset.from_dict({"prompt": prompts_of_length(tokenizer, args.prompts * total,
                                                          args.prompt_length)})

    def reward(completions, **_):
        return [float("<answer>" in c) + 0.01 * len(c) for c in completions]

    wanted = dict(
        output_dir="/tmp/trl-grpo-bench", per_device_train_batch_size=rows,
        gradient_accumulation_steps=1, num_generations=args.num_generations,
        max_prompt_length=args.prompt_length, max_completion_length=args.completion_length,
        temperature=1.0, beta=args.beta, learning_rate=1e-6, max_steps=total,
        logging_steps=10**6, save_strategy="no", report_to="none", bf16=dtype == torch.bfloat16,
        use_vllm=False, num_iterations=1, shuffle_dataset=False,
        use_cpu=not torch.cuda.is_available())
    # TRL renames and drops fields between releases: pass the ones this version has.
    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    config = GRPOConfig(**{k: v for k, v in wanted.items() if k in known})

    stamps: list[float] = []

    class Stamp(TrainerCallback):
        def on_step_end(self, *_, **__):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            stamps.append(time.perf_counter())

    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=data,
                          processing_class=tokenizer, callbacks=[Stamp()])
    started = time.perf_counter()
    trainer.train()
    steps = [b - a for a, b in zip([started, *stamps], stamps)][args.warmup:]
    import trl

    out = {"peer": "trl", "trl": trl.__version__, "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
           "rows": rows, "steps": len(steps),
           "step_s": round(statistics.median(steps), 4) if steps else None}
    print(json.dumps(out))
    if not args.json:
        print(f"TRL {out['trl']} GRPOTrainer, {rows} rows: {out['step_s']} s/step")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
