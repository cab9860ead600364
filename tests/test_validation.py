"""Validation has one home: each field's range or choices are declared with the field and
nowhere else, every named rule refuses with its own words, each choice tuple is spelled once
in src, the loss reads the algorithm config itself, and pre-flight runs its checks from one
list."""

from __future__ import annotations

import ast
import dataclasses
import re
import typing
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable

import pytest

from rlexp.algo import choices as algo_choices
from rlexp.algo.algorithm import algorithms
from rlexp.base.errors import UserError
from rlexp.config.rules import RULES
from rlexp.base.knobs import valid_of
from rlexp.config.schema import AlgoConfig, Config
from rlexp.config.validate import knobs, validate

SRC = Path(__file__).resolve().parents[1] / "src" / "rlexp"


def schema_fields(schema: type = Config, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (its field, its type: Optional and list unwrapped) of every leaf field of
    the schema; a list of sections counts through its item type (reward.functions.weight)."""
    out = {}
    for f in dataclasses.fields(schema):
        hint = typing.get_type_hints(schema)[f.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        inner = args[0] if typing.get_origin(hint) in (list, typing.Union) else hint
        if dataclasses.is_dataclass(inner):
            out.update(schema_fields(inner, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = (f, inner)
    return out


def test_every_numeric_field_declares_its_range_with_it():
    """Each int/float field (Optional and list ones too; bools are not) carries its interval in
    its own metadata, and a keys_of choice names a field of its own section."""
    fields = schema_fields()
    numeric = sorted(k for k, (_, kind) in fields.items() if kind in (int, float))
    assert len(numeric) > 100 and "run.dry_run" not in numeric  # bools are not numbers here
    assert {"train.learning_rate", "hardware.trainer_mesh.fsdp", "run.profile_steps",
            "reward.functions.weight"} <= set(numeric)
    assert [k for k in numeric if not valid_of(fields[k][0]).range] == []
    assert [k for k, (f, kind) in fields.items() if valid_of(f).range and k not in numeric] == []
    for key, (f, _) in fields.items():
        if valid_of(f).keys_of:
            assert f"{key.rpartition('.')[0]}.{valid_of(f).keys_of}" in fields, key


def test_no_range_or_choice_is_declared_outside_its_field():
    """A field's range and choices live in its `knob`, nowhere else: no dict keyed by dotted
    config keys (a second table of ranges or choices) in src, and no other class repeats three
    or more of a config section's fields with their (non-null) defaults, as LossSettings
    repeated 14 of AlgoConfig's."""
    sections = {f.name for f in dataclasses.fields(Config)}
    tables = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)
                        and isinstance(k.value, str) and re.fullmatch(r"[a-z_]+(\.\w+)+", k.value)
                        and k.value.split(".")[0] in sections]
                if len(keys) >= 2:
                    tables.append(f"{path.relative_to(SRC)}:{node.lineno}")
    declared: dict[str, dict[str, Any]] = {}  # section class -> field -> default
    stack = [Config]
    while stack:
        schema = stack.pop()
        declared[schema.__name__] = {f.name: f.default for f in dataclasses.fields(schema)
                                     if f.default not in (dataclasses.MISSING, None)}
        stack += [t for hint in typing.get_type_hints(schema).values()
                  for t in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(t)]
    repeats = []
    for path in sorted(SRC.rglob("*.py")):
        for cls in ast.walk(ast.parse(path.read_text())):
            if not isinstance(cls, ast.ClassDef) or cls.name in declared:
                continue
            own = {n.target.id: n.value for n in cls.body if isinstance(n, ast.AnnAssign)
                   and isinstance(n.target, ast.Name) and isinstance(n.value, ast.Constant)}
            for section, defaults in declared.items():
                same = [k for k, v in own.items() if k in defaults and v.value == defaults[k]]
                if len(same) >= 3:
                    repeats.append(f"{path.relative_to(SRC)}: {cls.name} repeats {section}'s "
                                   f"{', '.join(same)}")
    assert tables + repeats == []


def test_the_defaults_keep_every_rule():
    cfg = Config()
    assert [rule.name for rule in RULES if rule.check(cfg) is not None] == []
    assert len({rule.name for rule in RULES}) == len(RULES)


def _set(**changes: Any) -> Callable[[Config], None]:
    """A mutation of a default Config: section__field=value ("dataset__max_terms": 2)."""
    def mutate(cfg: Config) -> None:
        for dotted, value in changes.items():
            *path, name = dotted.split("__")
            obj: Any = cfg
            for part in path:
                obj = getattr(obj, part)
            setattr(obj, name, value)
    return mutate


# Rule name -> (a config that breaks it, the refusal word for word).
RULE_CASES: dict[str, tuple[Callable[[Config], None], str]] = {
    "algo_imports": (_set(algo__name="rlexp.algo.algorithm.Algorithm"),
                     "algo.name='rlexp.algo.algorithm.Algorithm': not an "
                     "rlexp.algo.algorithm.Algorithm (got type)"),
    "epsilon_high_at_least_epsilon": (
        _set(algo__epsilon=0.2, algo__epsilon_high=0.1),
        "algo.epsilon_high=0.1 is invalid: must be >= algo.epsilon (0.2) and < 1"),
    "rollout_correction_bounds": (
        _set(algo__rollout_correction="token_mask", algo__rollout_correction_clip_min=2.0,
             algo__rollout_correction_clip_max=1.5),
        "algo.rollout_correction_clip_min=2.0 is invalid: must be below "
        "algo.rollout_correction_clip_max (1.5)"),
    "loss_knobs_act": (
        _set(algo__loss="sapo", algo__delta=2.0),
        "algo.delta=2.0 is invalid: caps the ratio of algo.loss=ppo_clip or luspo only (TRL's "
        "clipped losses); algo.loss=sapo: leave it null"),
    "profile_steps_pair": (
        _set(run__profile_steps=[3, 2]),
        "run.profile_steps=[3, 2] is invalid: must be [] or [first, last] with first <= last "
        "(global steps, e.g. [2,3])"),
    "mini_batch_divides_batch": (
        _set(train__batch_size=8, train__mini_batch_size=3),
        "train.mini_batch_size=3 is invalid: must divide train.batch_size (8)"),
    "micro_batch_divides_mini_batch": (
        _set(train__batch_size=8, train__mini_batch_size=4, train__micro_batch_size=3),
        "train.micro_batch_size=3 is invalid: must divide the mini-batch size (4)"),
    "rollout_batch_set_once": (
        _set(rollout__micro_batch_size=8, rollout__per_device_batch_size=1),
        "rollout.per_device_batch_size=1 is invalid: sizes the sampler call as "
        "rollout.micro_batch_size=8 does: set one of them (the other null)"),
    "vllm_parallelism_tiles_the_rollout_mesh": (
        _set(rollout__name="vllm", rollout__tensor_parallel_size=2),
        "rollout.tensor_parallel_size=2 is invalid: times rollout.data_parallel_size=1 it must "
        "equal the 1 devices of hardware.rollout_mesh (hardware=cpu); -1 derives a size from the "
        "other (both -1: TP 1, DP 1)"),
    "rollout_micro_batch_fits_train_batches": (
        _set(train__batch_size=8, train__micro_batch_size=4, rollout__micro_batch_size=3),
        "rollout.micro_batch_size=3 is invalid: must divide or be a multiple of both the train "
        "micro batch (4) and the mini-batch (8)"),
    "kv_cache_holds_prompt_and_completion": (
        _set(rollout__kv_cache_size=100),
        "rollout.kv_cache_size=100 is invalid: must be >= rollout.max_prompt_length + "
        "rollout.max_completion_length"),
    "eval_samples_within_eval_set": (
        _set(eval__num_samples=100, dataset__num_eval=64),
        "eval.num_samples=100 is invalid: must be in [1, dataset.num_eval=64]"),
    "train_set_fills_a_batch": (
        _set(dataset__num_train=4, train__batch_size=8),
        "dataset.num_train=4 is invalid: must be >= train.batch_size (8)"),
    "operators_subset": (
        _set(dataset__operators="+x"),
        "dataset.operators='+x' is invalid: must be a non-empty subset of '+-*/'"),
    "terms_ordered": (
        _set(dataset__min_terms=3, dataset__max_terms=2),
        "dataset.max_terms=2 is invalid: must be >= dataset.min_terms (3) >= 1"),
    "answer_regex_for_regex_extractor": (
        _set(dataset__extractor="regex"),
        "dataset.answer_regex=None is invalid: must be set when dataset.extractor=regex"),
    "answer_regex_compiles": (
        _set(dataset__answer_regex="(a"),
        "dataset.answer_regex='(a' is invalid: not a Python regular expression (missing ), "
        "unterminated subpattern at position 0)"),
    "tracker_names_within_mlflow_limits": (
        _set(tracker__experiment="e" * 501),
        f"tracker.experiment='{'e' * 40}...(501 characters)' is invalid: MLflow takes "
        "experiment names of at most 500 characters"),
    "generated_dataset_reads_no_file": (
        _set(dataset__path="x.jsonl"),
        "dataset.path='x.jsonl' is invalid: rlexp.data.loaders.arithmetic generates its "
        "problems and would ignore it; pick a file dataset (dataset=gsm8k, or "
        "dataset._target_=rlexp.data.loaders.generic)"),
    "digits_ordered": (
        _set(dataset__min_digits=2, dataset__max_digits=1),
        "dataset.max_digits=1 is invalid: must be >= dataset.min_digits (2) >= 1"),
    "meshes_fill_devices": (
        _set(hardware__trainer_mesh=dataclasses.replace(Config().hardware.trainer_mesh, fsdp=2)),
        "hardware.trainer_mesh='fsdp=2,tp=1' is invalid: fsdp*tp must equal the 1 devices this "
        "role gets"),
    "split_fractions_fit": (
        _set(hardware__split="split", hardware__devices=2, hardware__trainer_fraction=0.6,
             hardware__sampler_fraction=0.6),
        "hardware.sampler_fraction=0.6 is invalid: trainer_fraction + sampler_fraction must be "
        "<= 1"),
    "replicas_split_the_rollout_mesh": (
        _set(rollout__replicas=2, hardware__platform="tpu"),
        "rollout.replicas=2 is invalid: must divide hardware.rollout_mesh.fsdp=1 (each replica "
        "takes fsdp/replicas x tp=1 of the 1 rollout devices): one of 1"),
    "replicas_need_an_accelerator": (
        _set(hardware__devices=2, rollout__replicas=2,
             hardware__trainer_mesh=dataclasses.replace(Config().hardware.trainer_mesh, fsdp=2),
             hardware__rollout_mesh=dataclasses.replace(Config().hardware.rollout_mesh, fsdp=2)),
        "rollout.replicas=2 is invalid: needs a TPU or GPU: on the CPU (hardware=cpu or "
        "hardware.emulate=true) Tunix's weight sync refuses the host-staged copy into "
        "replicated samplers; use 1 there"),
    "epochs_steps_in_range": (
        _set(train__epochs=1000, dataset__num_train=16000, train__batch_size=8),
        "train.epochs=1000 is invalid: makes 2000000 steps (1000 x dataset.num_train=16000 / "
        "train.batch_size=8), more than train.steps' 1000000"),
    "sync_every_needs_a_sampler_copy": (
        _set(rollout__sync_every=2),
        "rollout.sync_every=2 is invalid: has no effect: the sampler shares the trainer's weights "
        "(rollout=vanilla on the trainer's mesh); use 1, or hardware.split=split / rollout=vllm"),
    "sync_every_within_steps": (
        _set(rollout__name="vllm", rollout__sync_every=101),
        "rollout.sync_every=101 is invalid: must be in [1, train.steps=100]: the sampler would "
        "never get trained weights"),
    "lora_targets_match_a_projection": (
        _set(model__lora__rank=8, model__lora__targets=".*embedder"),
        "model.lora.targets='.*embedder' is invalid: matches no projection of "
        "model.family=qwen3; module paths are layers/<i>/{attn/q_proj,attn/k_proj,attn/v_proj,"
        "attn/o_proj,mlp/gate_proj,mlp/up_proj,mlp/down_proj}, e.g. '.*q_proj|.*down_proj'"),
    "lora_samples_with_vanilla_rollout": (
        _set(model__lora__rank=8, rollout__name="vllm"),
        "rollout.name='vllm' is invalid: LoRA (model.lora.rank > 0) samples with "
        "rollout=vanilla: rlexp does not pass adapters to vLLM yet"),
}


def test_every_rule_has_a_case():
    assert [rule.name for rule in RULES] == list(RULE_CASES)


@pytest.mark.parametrize("name", list(RULE_CASES))
def test_each_rule_refuses_in_its_own_words(name):
    mutate, message = RULE_CASES[name]
    cfg = Config()
    mutate(cfg)
    with pytest.raises(UserError) as err:
        validate(cfg)
    assert str(err.value) == message
    others = [r.name for r in RULES if r.name != name and _refuses(r.check, cfg)]
    assert others == []  # the case breaks this rule alone


def _refuses(check: Callable[[Config], Any], cfg: Config) -> bool:
    try:
        return check(cfg) is not None
    except UserError:
        return True


@pytest.mark.parametrize("key,value,message", [
    ("algo.ratio_level", "word",
     "algo.ratio_level='word' is invalid: valid choices are token, sequence, sequence_token, "
     "null (the algorithm's own)"),
    ("dataset.extractor", "last",
     "dataset.extractor='last' is invalid: valid choices are none, gsm8k, boxed, regex, or a "
     "dotted path to fn(text)"),
    ("algo.name", "ppo",
     f"algo.name='ppo' is invalid: valid choices are {', '.join(algorithms())}, or a dotted "
     "path to an rlexp.algo.algorithm.Algorithm"),
    ("algo.kl_estimator", "k4", "algo.kl_estimator='k4' is invalid: valid choices are k1, k2, k3"),
    ("train.prune.mode", "up", "train.prune.mode='up' is invalid: valid choices are max, min"),
    # the one check of model.family (rlexp.families.get is a plain lookup after it)
    ("model.family", "mamba",
     "model.family='mamba' is invalid: valid choices are cohere, gemma2, gemma3, llama3, qwen2, "
     "qwen3"),
])
def test_choices_refuse_with_the_valid_values(key, value, message):
    cfg = Config()
    section, _, name = key.rpartition(".")
    setattr(attrgetter(section)(cfg), name, value)
    with pytest.raises(UserError) as err:
        validate(cfg)
    assert str(err.value) == message


def test_a_saved_runs_unknown_family_is_refused_by_the_same_choice(tmp_path):
    """An export reads a run dir's model section, which no validate() saw: model.family's choices
    refuse it (rlexp.families.get is a plain lookup)."""
    from rlexp.engine.export import run_model

    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("model:\n  name: x\n  family: mamba\n")
    with pytest.raises(UserError) as err:
        run_model(tmp_path)
    assert str(err.value).endswith("model.family='mamba' is invalid: valid choices are "
                                   "cohere, gemma2, gemma3, llama3, qwen2, qwen3")


def test_null_and_dotted_choices_pass():
    cfg = Config()
    cfg.algo.ratio_level = None
    cfg.dataset.extractor = "mypkg.extract"
    validate(cfg)


def test_a_bad_gpu_type_is_blamed_before_the_figures_it_zeroes():
    cfg = Config()
    cfg.hardware.gpu_specs = {"h100": {}, "h200": {}}
    cfg.hardware.gpu_type = "b200"
    cfg.hardware.hbm_gib_per_device = 0.0  # what gpu.yaml's interpolation leaves
    with pytest.raises(UserError) as err:
        validate(cfg)
    assert str(err.value) == "hardware.gpu_type='b200' is invalid: valid choices are h100, h200"
    cfg.hardware.gpu_specs = {}  # off GPU the field is not a choice
    cfg.hardware.hbm_gib_per_device = 24.0
    validate(cfg)


# ---------------------------------------------------------------------- one spelling


def _choice_sets() -> dict[frozenset[str], str]:
    found = {frozenset(spec.choices): key for key, _, spec, _ in knobs(Config())
             if isinstance(spec.choices, tuple) and len(spec.choices) > 1}
    for name in dir(algo_choices):
        value = getattr(algo_choices, name)
        if name.isupper() and isinstance(value, tuple):
            found[frozenset(value)] = f"rlexp.algo.choices.{name}"
    return found


def test_no_choice_tuple_is_spelled_twice():
    """A tuple, list or set of strings in src equal to a choice tuple is a second spelling
    (the first is the tuple itself); use the constant instead."""
    wanted = _choice_sets()
    spelled: dict[frozenset[str], list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) > 1 and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                key = frozenset(e.value for e in node.elts)
                if key in wanted:
                    spelled.setdefault(key, []).append(f"{path.relative_to(SRC)}:{node.lineno}")
    twice = {wanted[k]: where for k, where in spelled.items() if len(where) > 1}
    assert twice == {}


# ---------------------------------------------------------------------- loss settings


def test_the_loss_reads_the_algo_config_with_its_nulls_filled():
    algo = AlgoConfig(name="gspo", beta=0.1, epsilon=0.3, num_generations=6, loss_agg="token-mean",
                      kl_estimator="k1", dynamic_sampling=True, mask_truncated=True)
    assert algo.for_loss() == dataclasses.replace(algo, ratio_level="sequence", epsilon_high=0.3)
    assert AlgoConfig(ratio_level="sequence", epsilon_high=0.28).for_loss().epsilon_high == 0.28
    assert AlgoConfig().for_loss().ratio_level == "token"


def test_tunix_settings_carry_the_loss_settings_and_name_every_choice():
    from rlexp.engine import algo_registry as registry

    algo = AlgoConfig(name="dapo", epsilon_high=0.28, loss_agg="sequence-mean-token-sum")
    settings = registry.algo_settings(algo)
    assert settings.loss == algo.for_loss() and settings.loss.advantage == algo.advantage
    assert (settings.beta, settings.epsilon, settings.num_generations) == (
        algo.beta, algo.epsilon, algo.num_generations)
    assert settings.loss_agg_mode == "seq-mean-token-sum"
    assert tuple(registry.TUNIX_KL_MODE) == algo_choices.KL_ESTIMATORS
    assert tuple(registry.TUNIX_LOSS_AGG) == algo_choices.LOSS_AGGREGATIONS


# ---------------------------------------------------------------------- pre-flight checks


def test_preflight_runs_its_checks_from_the_one_list(monkeypatch):
    from rlexp.launch import checks
    from rlexp.launch.preflight import preflight

    names = [c.name for c in checks.CHECKS]
    assert len(set(names)) == len(names)
    assert [c.name for c in checks.CHECKS if not c.dry_run] == [
        "rollout", "dataset_rows", "model_path", "inputs", "free_space"]
    seen: list[str] = []

    def refuse(cfg: Config, ctx: checks.CheckContext) -> None:
        seen.append("refuse")
        raise UserError("refused by the test's check")

    monkeypatch.setattr(checks, "CHECKS", (
        checks.Check("first", lambda cfg, ctx: seen.append(ctx.output_dir.name)),
        checks.Check("real_only", refuse, dry_run=False)))
    preflight(["run.dry_run=true", "hydra.run.dir=outputs/here"])  # a dry run skips real_only
    assert seen == ["here"]  # the context names the command's output dir
    with pytest.raises(UserError, match="refused by the test's check"):
        preflight([])
    assert seen[1:] == [seen[1], "refuse"]


def test_the_checks_keep_no_state_between_them():
    """Pre-flight checks take what they know of the command as an argument (CheckContext),
    never through module globals."""
    from rlexp.launch import checks

    tree = ast.parse(Path(checks.__file__).read_text())
    assert [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.Global, ast.Nonlocal))] == []
    mutable = [t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
               for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
               if isinstance(t, ast.Name) and not t.id.isupper()]
    assert mutable == []  # module-level names are constants (UPPER_CASE) only
    with pytest.raises(dataclasses.FrozenInstanceError):
        checks.CheckContext().output_dir = Path("x")  # type: ignore[misc]


def test_the_command_context_says_where_jobs_run():
    from omegaconf import OmegaConf

    from rlexp.launch.checks import check_command

    def base(launcher: str) -> Any:
        return OmegaConf.create({"hydra": {"runtime": {"choices": {"hydra/launcher": launcher}},
                                           "launcher": {"n_jobs": 1}}})

    out = Path("outputs/sweeps/x")
    assert check_command(out, base("xpk"), multirun=False).jobs_run_elsewhere is False
    ctx = check_command(out, base("basic"), multirun=False)
    assert (ctx.output_dir, ctx.jobs_run_elsewhere) == (out, False)


@pytest.mark.parametrize("launcher, address, elsewhere", [
    ("xpk", None, True), ("rlexp_slurm", None, True), ("submitit_slurm", None, True),
    ("rlexp_ray", "auto", False), ("rlexp_ray", "127.0.0.1:6379", False),
    ("rlexp_ray", "10.0.0.7:6379", True), ("rlexp_ray", "ray://head.example:10001", True),
    ("joblib", None, False), ("basic", None, False)])
def test_which_launchers_run_their_jobs_elsewhere(launcher, address, elsewhere):
    from omegaconf import OmegaConf

    from rlexp.launch.checks import jobs_run_elsewhere

    base = OmegaConf.create({"hydra": {"runtime": {"choices": {"hydra/launcher": launcher}},
                                       "launcher": {"address": address}}})
    assert jobs_run_elsewhere(base) is elsewhere


def test_a_store_that_only_the_cluster_resolves_is_one_warning_for_remote_jobs(tmp_path):
    """xpk's pods reach a cluster-internal store (mlflow.mlflow.svc.cluster.local) that this
    machine cannot resolve: the dry run goes on, said in one line; nothing is left on disk."""
    from helpers import cli, said

    proc = cli("-m", "hydra/launcher=xpk", "hydra.launcher.dry_run=true", "hardware=v6e-8",
               "tracker.uri=http://mlflow.svc.invalid:5000", "run.output_uri=gs://b/r",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = said(proc.stderr)
    warned = [ln for ln in lines if "mlflow.svc.invalid" in ln]
    assert len(warned) == 1 and warned[0].startswith("rlexp: warning: tracker.uri="), lines
    assert "does not resolve" in warned[0] and "the jobs run elsewhere" in warned[0]
    assert len(lines) <= 3 and "Traceback" not in proc.stderr, lines
    assert list(tmp_path.iterdir()) == []


def test_a_completion_too_short_for_the_answer_is_one_warning(tmp_path):
    """rollout.max_completion_length=1: no completion can hold '<answer>0</answer>' (18 tokens
    of the tiny model's char tokenizer), so the run would train at reward 0: said once."""
    from helpers import cli, said

    proc = cli("rollout.max_completion_length=1", "run.dry_run=true", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = said(proc.stderr)
    assert lines == ["rlexp: warning: rollout.max_completion_length=1 cannot hold the shortest "
                     "correct answer of dataset.template=answer, '<answer>0</answer>' (18 "
                     "tokens with model.tokenizer=char): every completion is cut before it, "
                     "so reward and accuracy stay 0; set rollout.max_completion_length >= 18"]
    assert list(tmp_path.iterdir()) == []
    ok = cli("rollout.max_completion_length=18", "run.dry_run=true", cwd=tmp_path)
    assert ok.returncode == 0 and said(ok.stderr) == [], ok.stderr


@pytest.mark.parametrize("template, text", [
    ("answer", "<answer>0</answer>"),
    ("reasoning", "<reasoning></reasoning>\n<answer>0</answer>")])
def test_the_shortest_answer_and_its_tokens(template, text, tmp_path):
    from types import SimpleNamespace

    from rlexp.data.templates import shortest_answer
    from rlexp.launch.checks import answer_tokens

    assert shortest_answer(template) == text
    assert answer_tokens(text, SimpleNamespace(tokenizer="char", path=None))[0] == len(text)
    # hf without a local tokenizer.json: a lower bound, one token per tag and the answer
    bound = answer_tokens(text, SimpleNamespace(tokenizer="hf", path=str(tmp_path)))
    assert bound == (text.count("<") + 1, f"at least {text.count('<') + 1} tokens")


def test_each_plan_is_made_once_and_handed_to_the_dry_run(monkeypatch, capsys):
    """check_fits makes each job's plan; the dry run prints that one and makes none."""
    from rlexp.launch import checks, dry_run
    from rlexp.launch.preflight import preflight

    made: list[Config] = []
    real = checks.make_plan
    monkeypatch.setattr(checks, "make_plan", lambda cfg: made.append(cfg) or real(cfg))
    pre = preflight(["-m", "algo.beta=0,0.04", "run.dry_run=true"])
    assert made == pre.jobs and [p is not None for p in pre.plans] == [True, True]
    assert [p.lines for p in pre.plans] == [real(cfg).lines for cfg in pre.jobs]
    dry_run.dry_run(pre)
    assert len(made) == 2  # none more
    printed = capsys.readouterr().out
    assert printed.count("rlexp plan (dry run") == 2 and pre.plans[1].lines[1] in printed


def _unfit() -> Config:
    cfg = Config()
    cfg.hardware.hbm_gib_per_device = 0.001  # tiny's plan needs ~2 GiB a device
    return cfg


def test_a_plan_that_does_not_fit_is_refused_by_check_fits_alone():
    from rlexp.launch import checks
    from rlexp.planning.plan import make_plan

    cfg = _unfit()
    plan = make_plan(cfg)
    assert not plan.fits and plan.why
    with pytest.raises(UserError) as err:
        checks.check_fits(cfg, checks.CheckContext())
    assert str(err.value) == plan.why
    cfg.run.dry_run = True  # a dry run gets the plan; the refusal follows its printing
    assert checks.check_fits(cfg, checks.CheckContext()).why == plan.why
    with pytest.raises(UserError, match="^" + plan.why[:40]):
        checks.refuse_after_plan(cfg, checks.CheckContext(), plan)


def test_a_launched_sweeps_dry_run_job_that_does_not_fit_is_refused_before_launch():
    from rlexp.launch.preflight import Preflight, before_launch
    from rlexp.planning.plan import make_plan

    cfg = _unfit()
    cfg.run.dry_run = True
    plan = make_plan(cfg)
    pre = Preflight(multirun=True, jobs=[cfg], plans=[plan], job_overrides=[[]])
    with pytest.raises(UserError) as err:
        before_launch(pre)
    assert str(err.value) == plan.why


def test_the_job_does_not_check_the_plan_again():
    """experiment.run takes pre-flight's word: no second fits refusal in the job."""
    from rlexp.job import experiment

    body = ast.get_source_segment(Path(experiment.__file__).read_text(), next(
        n for n in ast.parse(Path(experiment.__file__).read_text()).body
        if isinstance(n, ast.FunctionDef) and n.name == "run"))
    assert "plan.fits" not in body and "plan.why" not in body


@pytest.mark.parametrize(("tp", "dp", "devices"), [
    (-1, -1, 4), (-1, -1, 8), (-1, 2, 8), (4, -1, 8), (2, 4, 8), (-1, 1, 16), (8, -1, 64)])
def test_vllm_parallel_sizes_resolve_as_tunix_resolves_them(tp, dp, devices):
    """-1 sizes equal Tunix 0.1.7's own resolve_parallelism_sizes (the function its vLLM sampler
    calls) on a mesh of that many devices (only its shape is read)."""
    from types import SimpleNamespace

    from tunix.generate.utils import resolve_parallelism_sizes

    from rlexp.config.validate import resolve_parallel_sizes

    mesh = SimpleNamespace(shape={"fsdp": devices, "tp": 1})
    want = resolve_parallelism_sizes(mesh, tensor_parallel_size=tp, data_parallel_size=dp)[:2]
    assert resolve_parallel_sizes(tp, dp, devices) == want


def test_a_seed_recipe_with_minus_one_sizes_takes_every_sampler_chip(compose_config):
    """maxtext_llama3.1-8b_grpo says -1/-1 as rl.yml does: TP 4 on v5p-8, TP 8 on v6e-8."""
    for hardware, tp in (("v5p-8", 4), ("v6e-8", 8)):
        r = compose_config("experiment=maxtext_llama3.1-8b_grpo", f"hardware={hardware}").rollout
        assert (r.tensor_parallel_size, r.data_parallel_size) == (tp, 1)
