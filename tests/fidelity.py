"""The seed recipes' fidelity tables: each conf/experiment recipe that reproduces a published
workload, its settings as that workload has them (value and where in the source), and the
settings rlexp substitutes on purpose, with the reason. tests/test_fidelity.py checks the
composed configs against these rows and that README.md shows the same tables (`markdown`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAXTEXT = "github.com/AI-Hypercomputer/maxtext"
EASYDEL = "github.com/erfanzar/EasyDeL"


@dataclass(frozen=True)
class Row:
    # Config key (`reward` = the conf/reward group whose functions the recipe must have).
    key: str
    # The value the source has, in rlexp's units.
    value: object
    # Where the source has it (file:line at the seed's commit, or the command's flag).
    where: str


@dataclass(frozen=True)
class Substitute:
    key: str
    # rlexp's value.
    value: object
    # What the source has instead.
    source: str
    # Why rlexp differs.
    why: str


@dataclass(frozen=True)
class Seed:
    recipes: tuple[str, ...]
    workload: str
    source: str
    rows: tuple[Row, ...]
    substitutes: tuple[Substitute, ...] = field(default_factory=tuple)


_RL = "rl.yml"  # src/MaxText/configs/rl.yml at a4de80cc5
# The gold answer: MaxText's extract_hash_answer (utils_rl.py:175-179 at a4de80cc5, the same
# function in the other MaxText seeds) keeps the text after '####' as written.
_GOLD_COMMA = Substitute(
    "dataset.extractor", "gsm8k", "the text after '####' as written: `1,375`",
    "rlexp's loader makes the gold `1375` (thousands commas dropped); in MaxText a correct `1375` "
    "against `1,375` fails float() in check_answer and scores -0.5 (79 of GSM8K's 7,473 train "
    "rows and 14 of its 1,319 test rows carry a comma)")
SEED_000 = Seed(
    ("maxtext_llama3.1-8b_grpo", "maxtext_llama3.1-8b_gspo"),
    "MaxText: Reinforcement Learning on single-host TPUs (Llama3.1-8B-IT, GSM8K, GRPO and GSPO)",
    f"{MAXTEXT} @ a4de80cc5: docs/tutorials/posttraining/rl.md, src/MaxText/configs/rl.yml, "
    "src/MaxText/rl/{train_rl,utils_rl,evaluate_rl}.py",
    (
        Row("model.path", "meta-llama/Llama-3.1-8B-Instruct", "rl.md: TOKENIZER"),
        Row("hardware.name", "v5p-8", "rl.md: \"such as v6e-8/v5p-8\""),
        Row("dataset.name", "gsm8k", f"{_RL}:172 dataset_name"),
        Row("dataset.split", "train", f"{_RL}:173 train_split"),
        Row("dataset.eval_split", "test", f"{_RL}:174 eval_split"),
        Row("dataset.template", "reasoning", f"{_RL}:163-166 reasoning/solution tokens"),
        Row("dataset.reasoning_tag", "reasoning", f"{_RL}:163 reasoning_start_token"),
        Row("algo.num_generations", 2, f"{_RL}:39 num_generations"),
        Row("algo.num_iterations", 1, f"{_RL}:43 num_iterations"),
        Row("algo.beta", 0.08, f"{_RL}:48 grpo_beta"),
        Row("algo.epsilon", 0.2, f"{_RL}:51 grpo_epsilon"),
        Row("algo.kl_estimator", "k3", "train_rl.py:421 GrpoConfig without a KL mode: Tunix's "
            "low_var_kl (k3) then"),
        Row("rollout.max_prompt_length", 256, f"{_RL}:134 max_prefill_predict_length"),
        Row("rollout.max_completion_length", 768, f"{_RL}:135 max_target_length 1024 - 256"),
        Row("rollout.hbm_utilization", 0.72, f"{_RL}:137 hbm_utilization_vllm"),
        Row("rollout.tensor_parallel_size", 4, f"{_RL}:28-29 rollout_data/tensor_parallelism "
            "-1: train_rl.py:212-215 passes neither, Tunix's -1/-1 is TP = the 4 sampler chips"),
        Row("rollout.data_parallel_size", 1, f"{_RL}:28-29 (-1/-1: Tunix's DP 1)"),
        Row("rollout.temperature", 0.9, f"{_RL}:142 decode_sampling_temperature"),
        Row("rollout.top_k", 50, f"{_RL}:143 decode_sampling_top_k"),
        Row("rollout.top_p", 1.0, f"{_RL}:144 decode_sampling_nucleus_p"),
        Row("train.batch_size", 1, f"{_RL}:90 batch_size"),
        Row("train.steps", 4, f"{_RL}:93,104 num_batches 4 x num_epoch 1"),
        Row("train.learning_rate", 3e-6, f"{_RL}:106 learning_rate"),
        Row("train.lr_schedule", "warmup_cosine", "utils_rl.py get_optimizer"),
        Row("train.warmup_steps", 0, "base.yml:645 warmup_steps_fraction 0.1 x 4 steps"),
        Row("train.end_learning_rate", 0.0, "utils_rl.py get_optimizer end_value=0.0"),
        Row("train.grad_clip", 0.1, f"{_RL}:109 gradient_clipping_threshold"),
        Row("train.weight_decay", 0.1, "base.yml:714 adam_weight_decay"),
        Row("train.checkpoint_every", 50, f"{_RL}:149 checkpoint_period"),
        Row("train.keep_checkpoints", 10, f"{_RL}:150 max_num_checkpoints_to_keep"),
        Row("train.seed", 42, f"{_RL}:32 data_shuffle_seed"),
        Row("eval.every", 10, f"{_RL}:102 eval_interval"),
        Row("eval.num_samples", 5, f"{_RL}:99 num_test_batches 5 x batch_size 1"),
        Row("eval.pass_k", 1, f"{_RL}:127 num_eval_passes"),
        Row("reward", "maxtext", "train_rl.py:465-470 reward_fns (utils_rl.py), "
            f"{_RL}:154-160 constants"),
    ),
    (
        Substitute("dataset.hub", "openai/gsm8k", "TFDS 'gsm8k'", "the same rows from the "
                   "Hugging Face hub; rlexp has no TFDS loader"),
        Substitute("eval.temperature", 0.7, "greedy only (rl.yml:112)", "rlexp scores "
                   "accuracy on greedy completions too, and samples k more for pass@k/maj@k"),
        _GOLD_COMMA,
    ),
)

_PW = "grpo_llama3_1_70b_demo_pw.py"  # src/MaxText/examples/ at fa273e9e1
SEED_001 = Seed(
    ("maxtext_llama3.1-70b_grpo_pathways",),
    "MaxText: Try GRPO with Pathways! (Llama3.1-70B-IT, GSM8K, v5p-64)",
    f"{MAXTEXT} @ fa273e9e1: docs/tutorials/grpo with pathways.md, "
    f"src/MaxText/examples/{_PW}",
    (
        Row("model.path", "meta-llama/Llama-3.1-70B-Instruct", f"{_PW}:256 tokenizer"),
        Row("hardware.name", "v5p-64", "grpo with pathways.md: \"the following recipe v5p-64\""),
        Row("hardware.trainer_fraction", 0.5, f"{_PW}:232 TRAINER_DEVICES_FRACTION"),
        Row("hardware.sampler_fraction", 0.5, f"{_PW}:233 SAMPLER_DEVICES_FRACTION"),
        Row("dataset.name", "gsm8k", f"{_PW}:288 get_dataset (TFDS gsm8k)"),
        Row("algo.num_generations", 2, f"{_PW}:179 NUM_GENERATIONS"),
        Row("algo.num_iterations", 1, f"{_PW}:183 NUM_ITERATIONS"),
        Row("algo.beta", 0.08, f"{_PW}:187 BETA"),
        Row("algo.epsilon", 0.2, f"{_PW}:190 EPSILON"),
        Row("rollout.max_prompt_length", 256, f"{_PW}:169 MAX_PROMPT_LENGTH"),
        Row("rollout.max_completion_length", 768, f"{_PW}:170 TOTAL_GENERATION_STEPS"),
        Row("rollout.temperature", 0.9, f"{_PW}:173 TEMPERATURE"),
        Row("rollout.top_p", 1.0, f"{_PW}:174 TOP_P"),
        Row("rollout.top_k", 50, f"{_PW}:175 TOP_K"),
        Row("rollout.hbm_utilization", 0.72, f"{_PW}:234 HBM_UTILIZATION_VLLM"),
        Row("rollout.tensor_parallel_size", 16, f"{_PW}:942 RolloutConfig without parallel "
            "sizes: Tunix's -1/-1 is TP = the 16 sampler chips"),
        Row("rollout.data_parallel_size", 1, f"{_PW}:942 (-1/-1: Tunix's DP 1)"),
        Row("train.batch_size", 1, f"{_PW}:193 BATCH_SIZE"),
        Row("train.steps", 4, f"{_PW}:205 MAX_STEPS = 4 batches x 1 x 1.0 x 1"),
        Row("train.learning_rate", 3e-6, f"{_PW}:208 LEARNING_RATE"),
        Row("train.weight_decay", 0.1, f"{_PW}:211 WEIGHT_DECAY"),
        Row("train.warmup_steps", 0, f"{_PW}:216 WARMUP_STEPS = int(0.1 x 4)"),
        Row("train.grad_clip", 0.1, f"{_PW}:220 MAX_GRAD_NORM"),
        Row("train.checkpoint_every", 500, f"{_PW}:160 SAVE_INTERVAL_STEPS"),
        Row("train.keep_checkpoints", 4, f"{_PW}:161 MAX_TO_KEEP"),
        Row("train.seed", 42, f"{_PW}:164 SEED"),
        Row("eval.every", 10, f"{_PW}:201 EVAL_EVERY_N_STEPS"),
        Row("eval.num_samples", 5, f"{_PW}:199 NUM_TEST_BATCHES 5 x BATCH_SIZE 1"),
        Row("algo.kl_estimator", "k3", "Tunix GrpoLearner's KL then (compute_kl_divergence "
            "default low_var_kl)"),
        Row("reward", "maxtext", f"{_PW}:534-641 (the same functions and constants as "
            "utils_rl.py at a4de80cc5)"),
    ),
    (
        Substitute("dataset.hub", "openai/gsm8k", "TFDS 'gsm8k'", "the same rows from the "
                   "Hugging Face hub; rlexp has no TFDS loader"),
        _GOLD_COMMA,
    ),
)

_README = "GRPO_README.md"  # src/MaxText/examples/ at a703dfd6a
_DUMMY = ("grpo_trainer.py scores with grpo_utils.dummy_reward_len (-|20 - length|), a "
          "systems-test reward; rlexp trains the GSM8K task with MaxText's own GSM8K rewards")
# grpo_demo.py's defaults as GRPO_README.md lists them (both demo recipes keep them).
_DEMO_DEFAULTS = (
    Row("train.steps", 100, f"{_README}: --steps=100"),
    Row("train.learning_rate", 3e-6, f"{_README}: --learning_rate (default: 3e-6)"),
    Row("algo.num_generations", 2, f"{_README}: --num_generations (default: 2)"),
    Row("algo.beta", 0.08, f"{_README}: --grpo_beta (default: 0.08)"),
    Row("algo.epsilon", 0.2, f"{_README}: --grpo_epsilon (default: 0.2)"),
    Row("rollout.max_prompt_length", 256, f"{_README}: --max_prefill_predict_length 256"),
    Row("rollout.max_completion_length", 512, f"{_README}: --max_target_length 768 - 256"),
    Row("train.checkpoint_every", 50, f"{_README}: --checkpoint_period (default: 50)"),
)
SEED_002 = Seed(
    ("maxtext_grpo_demo",),
    "MaxText: GRPO Demo - Unified Training Interface (grpo_demo.py, Llama3.1-8B single host)",
    f"{MAXTEXT} @ a703dfd6a: src/MaxText/examples/{_README}, grpo_demo.py",
    (
        Row("model.name", "llama3.1-8b", f"{_README}: --model_name=llama3.1-8b"),
        Row("model.path", "meta-llama/Llama-3.1-8B-Instruct", f"{_README}: --tokenizer_path"),
        Row("dataset.name", "gsm8k", f"{_README}: --hf_path (default: gsm8k)"),
        *_DEMO_DEFAULTS,
        Row("run.profile_steps", [6, 8], "grpo.yml:83-85 profiler: xplane, skip_first_n_steps_for_"
            "profiler: 5, profiler_steps: 3"),
    ),
    (
        Substitute("reward", "maxtext", "dummy_reward_len", _DUMMY),
        Substitute("hardware.name", "v6e-8", "no slice named", "8 chips, as grpo.yml's "
                   "ici_fsdp_parallelism 8 for Llama3.1-8B"),
        _GOLD_COMMA,
    ),
)
SEED_002_CUSTOM = Seed(
    ("maxtext_grpo_demo_custom",),
    "MaxText: GRPO Demo - Unified Training Interface, \"With Custom GRPO Parameters\"",
    f"{MAXTEXT} @ a703dfd6a: src/MaxText/examples/{_README}",
    (
        Row("model.name", "llama3.1-8b", f"{_README}: --model_name=llama3.1-8b"),
        Row("algo.num_generations", 4, f"{_README}: --num_generations=4"),
        Row("algo.beta", 0.04, f"{_README}: --grpo_beta=0.04"),
        Row("algo.epsilon", 0.15, f"{_README}: --grpo_epsilon=0.15"),
        Row("train.learning_rate", 5e-6, f"{_README}: --learning_rate=5e-6"),
        Row("train.steps", 200, f"{_README}: --steps=200"),
    ),
    SEED_002.substitutes,
)

_DEMO = "grpo_demo.py"  # src/MaxText/examples/ at a703dfd6a
_TRAINER = "grpo_trainer.py"  # src/MaxText/experimental/rl/ at a703dfd6a and 28e5097ac
SEED_002_70B = Seed(
    ("maxtext_grpo_demo_llama3.1-70b_pathways",),
    "MaxText: GRPO Demo - Unified Training Interface, \"Llama3.1-70B with Pathways "
    "(Multi-Host)\"",
    f"{MAXTEXT} @ a703dfd6a: src/MaxText/examples/{_README}, {_DEMO}, "
    f"src/MaxText/experimental/rl/{_TRAINER}",
    (
        Row("model.name", "llama3.1-70b", f"{_README}: --model_name=llama3.1-70b"),
        Row("model.path", "meta-llama/Llama-3.1-70B-Instruct", f"{_README}: --tokenizer_path"),
        Row("hardware.name", "v5p-64", f"{_TRAINER}:548-554: 4 x 4 inference devices, the rest "
            "train at --ici_fsdp_parallelism=16: 32 chips"),
        Row("hardware.split", "split", f"{_README}: --use_pathways ({_TRAINER}:548-554 "
            "disjoint device lists)"),
        Row("hardware.trainer_mesh.fsdp", 16, f"{_README}: --ici_fsdp_parallelism=16"),
        Row("hardware.rollout_mesh.fsdp", 16, f"{_README}: --inference_replicas=4 x "
            "--inference_devices_per_replica=4 devices"),
        Row("rollout.replicas", 1, f"{_DEMO}:299 copies --ici_fsdp_parallelism=16 into the "
            f"inference config: one inference model over the 16 ({_TRAINER}:553-554); the "
            "replica flags only count devices"),
        Row("rollout.per_device_batch_size", 2, f"{_DEMO}:304 per_device_batch_size 1 x "
            "num_generations 2"),
        Row("rollout.sync_every", 1, "grpo.yml:48 inference_rollouts"),
        Row("train.batch_size", 16, f"{_README}: --per_device_batch_size (default: 1) x 16 "
            "trainer chips"),
        *_DEMO_DEFAULTS,
    ),
    (
        Substitute("reward", "maxtext", "dummy_reward_len", _DUMMY),
        _GOLD_COMMA,
        Substitute("rollout.micro_batch_size", None, "32 prompts a sampler call (2 x 16 "
                   "devices), the surplus buffered for the next step", "rlexp samples each "
                   "step's own 16 prompts: a call holds at most one mini-batch"),
    ),
)

_GRPO = "src/MaxText/experimental/rl/README.md"
_E2E = "end_to_end/tpu/test_grpo.sh"
SEED_003 = Seed(
    ("maxtext_llama3.3-70b_grpo_v5p-256",),
    "MaxText: Group Relative Policy Optimization (GRPO) in MaxText (Llama3.3-70B, v5p-256)",
    f"{MAXTEXT} @ 28e5097ac: {_GRPO}, {_E2E}, src/MaxText/experimental/rl/{_TRAINER}",
    (
        Row("model.path", "meta-llama/Llama-3.3-70B-Instruct", "README: TOKENIZER="),
        Row("hardware.name", "v5p-256", "README: \"targets a v5p-256 cluster\""),
        Row("hardware.split", "split", "README: 64 devices train, \"the other 64\" sample"),
        Row("hardware.trainer_mesh.fsdp", 64, "README: \"sharded using FSDP across these "
            "devices\""),
        Row("hardware.rollout_mesh.fsdp", 8, f"README: NUM_SAMPLERS=8; {_E2E}:48 "
            "ici_data_parallelism"),
        Row("hardware.rollout_mesh.tp", 8, f"README: DEVICES_PER_SAMPLER=8; {_E2E}:48 "
            "ici_tensor_parallelism"),
        Row("rollout.replicas", 8, f"README: NUM_SAMPLERS=8 ({_E2E}:42 inference_replicas): "
            "DP across samplers, TP within"),
        Row("rollout.per_device_batch_size", 8, "README: INFERENCE_PER_DEVICE_BATCH_SIZE=8"),
        Row("rollout.sync_every", 5, f"{_E2E}:43 inference_rollouts=5"),
        Row("train.batch_size", 64, "README: TRAINING_PER_DEVICE_BATCH_SIZE=1 x 64 trainer "
            "chips"),
        Row("algo.num_generations", 2, f"{_E2E}:28 NUM_GENERATIONS"),
        Row("rollout.max_prompt_length", 128, f"{_E2E}:26 MAX_PREFILL_LENGTH"),
        Row("rollout.max_completion_length", 128, f"{_E2E}:27 MAX_TARGET_LENGTH 256 - 128"),
        Row("train.steps", 20, "README: STEPS=20"),
    ),
    (
        Substitute("reward", "maxtext", "dummy_reward_len", _DUMMY),
        _GOLD_COMMA,
        Substitute("rollout.micro_batch_size", None, "512 prompts a sampler call (8 x 64 "
                   "devices), the surplus buffered for later steps", "rlexp samples each "
                   "step's own 64 prompts: a call holds at most one mini-batch"),
    ),
)

_LAUNCH = "launch.py"  # tutorials/post-training/group_relative_policy_optimization/ at e2e6dccc
SEED_004 = Seed(
    ("easydel_grpo_numina_tir",),
    "EasyDeL: Fine-Tuning with GRPO on TPUs using EasyDeL & Ray (NuminaMath-TIR, v4-64)",
    f"{EASYDEL} @ e2e6dccc: tutorials/post-training/group_relative_policy_optimization/"
    "README.md and launch.py",
    (
        Row("model.path", "cohereLabs/aya-expanse-8b", f"{_LAUNCH}:25 MODEL_ID"),
        Row("hardware.name", "v4-64", f"{_LAUNCH}:53 TpuAcceleratorConfig(\"v4-64\")"),
        Row("dataset.hub", "AI-MO/NuminaMath-TIR", f"{_LAUNCH}:26 DATASET_ID"),
        Row("dataset.split", "train", f"{_LAUNCH}:192 split=[\"train[:100%]\", ...]"),
        Row("dataset.eval_split", "test", f"{_LAUNCH}:192 split=[..., \"test[:100%]\"]"),
        Row("dataset.question_field", "problem", f"{_LAUNCH}:200 example[\"problem\"]"),
        Row("dataset.answer_field", "solution", f"{_LAUNCH}:166 batch[\"solution_ids\"]"),
        Row("dataset.extractor", "none", f"{_LAUNCH}:170 parse(solution): the whole solution"),
        Row("dataset.reasoning_tag", "think", f"{_LAUNCH}:43 SYSTEM_PROMPT <think> </think>"),
        Row("dataset.system_prompt", "launch.py SYSTEM_PROMPT", f"{_LAUNCH}:43-48"),
        Row("model.dtype", "bfloat16", f"{_LAUNCH}:142 dtype"),
        Row("model.param_dtype", "bfloat16", f"{_LAUNCH}:141 param_dtype"),
        Row("algo.num_generations", 4, f"{_LAUNCH}:85 num_return_sequences"),
        Row("algo.beta", 0.04, f"{_LAUNCH}:114 beta"),
        Row("rollout.max_prompt_length", 2048, f"{_LAUNCH}:89 max_prompt_length"),
        Row("rollout.max_completion_length", 2048, f"{_LAUNCH}:90 max_completion_length"),
        Row("rollout.temperature", 0.7, f"{_LAUNCH}:88 temperature"),
        Row("rollout.top_p", 0.95, f"{_LAUNCH}:87 top_p"),
        Row("rollout.top_k", 50, f"{_LAUNCH}:86 top_k"),
        Row("train.batch_size", 8, f"{_LAUNCH}:84 total_batch_size"),
        Row("train.epochs", 3, f"{_LAUNCH}:101 num_train_epochs"),
        Row("train.learning_rate", 1e-6, f"{_LAUNCH}:96 learning_rate"),
        Row("train.end_learning_rate", 6e-7, f"{_LAUNCH}:97 learning_rate_end"),
        Row("train.lr_schedule", "linear", f"{_LAUNCH}:103 EasyDeLSchedulers.LINEAR"),
        Row("train.warmup_steps", 0, f"{_LAUNCH}:113 warmup_steps"),
        Row("train.grad_clip", 1.0, f"{_LAUNCH}:111 clip_grad"),
        Row("train.checkpoint_every", 1000, f"{_LAUNCH}:106 save_steps"),
        Row("reward", "easydel_numina", f"{_LAUNCH}:149-187, 244 reward_funcs"),
    ),
    (
        Substitute("train.keep_checkpoints", 28, "save_total_limit=0 (all)", "rlexp keeps a "
                   "finite number: every save of 27166 steps at 1000"),
        Substitute("train.remat", "full", "gradient_checkpointing NONE", "4096-token rows of "
                   "an 8B model on v4 chips"),
    ),
)

SEEDS = (SEED_000, SEED_001, SEED_002, SEED_002_CUSTOM, SEED_002_70B, SEED_003, SEED_004)


def _show(v: object) -> str:
    return f"`{v}`"


def markdown(seed: Seed) -> str:
    """The seed's table as README.md shows it."""
    recipes = ", ".join(f"`experiment={r}`" for r in seed.recipes)
    lines = [f"**{seed.workload}** ({recipes}). Source: {seed.source}.", "",
             "| setting | seed's value | where in the seed |", "|---|---|---|"]
    lines += [f"| `{r.key}` | {_show(r.value)} | {r.where} |" for r in seed.rows]
    if seed.substitutes:
        lines += ["", "| substituted | rlexp | the seed | why |", "|---|---|---|---|"]
        lines += [f"| `{s.key}` | {_show(s.value)} | {s.source} | {s.why} |"
                  for s in seed.substitutes]
    return "\n".join(lines)
