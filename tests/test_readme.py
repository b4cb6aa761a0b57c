"""Every command of the README is exercised here (x-transformers' README drifted from its code; ours cannot).

Python blocks are executed. Shell lines are run when cheap; ``make`` targets are checked with ``make -n`` (the
suite itself is what ``make test`` runs), and lines that start long jobs map to the test that covers them.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_reference

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def install_lines() -> list[str]:
    """The shell lines of the README's "Install as a package" block (tests/test_wheel.py runs them)."""
    section = README.split("### Install as a package", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


README_INSTALL = install_lines()


# README lines that start long jobs -> the test that runs them (at a small scale). Checked to exist.
COVERED: dict[str, str] = {
    ".venv/bin/normlab analyze --scale quick --out runs/analysis": "tests/test_analysis.py::test_analyze_command_end_to_end",
    ".venv/bin/normlab analyze --scale paper --out runs/analysis-paper": "tests/test_analysis.py::test_analyze_command_end_to_end",
    ".venv/bin/normlab diagnose --set placement=post --set encoder_layers=12 --set decoder_layers=12": "tests/test_diagnose.py::test_diagnose_command",
    "make reproduce": "tests/test_reproduce.py::test_smoke_reproduce_writes_the_report",
    # the sweep: the smoke preset runs the same command end to end
    ".venv/bin/normlab sweep --scale quick --out runs/sweep-quick": "tests/test_sweep.py::test_smoke_sweep_cli",
    ".venv/bin/normlab sweep --scale standard --out runs/sweep-standard": "tests/test_sweep.py::test_smoke_sweep_cli",
    ".venv/bin/normlab sweep --scale full --out runs/sweep-full": "tests/test_sweep.py::test_smoke_sweep_cli",
    ".venv/bin/normlab sweep --scale schemes --out runs/sweep-schemes":
        "tests/test_sweep.py::test_the_schemes_preset_is_the_quick_shape_with_the_translation_schemes_and_five_seeds",
    ".venv/bin/normlab sweep --scale quick --out runs/sweep-more --set 'schemes=[post,pre,deepnorm,pre/rmsnorm]' --set seeds=3":
        "tests/test_sweep.py::test_smoke_sweep_cli",
    ".venv/bin/normlab sweep --scale quick --out runs/sweep-quick --report-only": "tests/test_sweep.py::test_smoke_sweep_cli",
    ".venv/bin/normlab sweep --scale quick --set layers=6 --out runs/depth-6 --import docs/results/sweep-quick/depth-6":
        "tests/test_sweep.py::test_import_extends_a_sweep_that_kept_only_its_sweep_json",
    # diagnose held out: measures diagnose on the sweeps whose sweep.json has no table (a minute and more)
    ".venv/bin/normlab sweep --held-out docs/results/sweep-lm docs/results/sweep-quick/edge-quick --out runs/held-out":
        "tests/test_edge.py::test_held_out_report_over_sweeps",
    # Speed: the peers are an optional extra; the benchmark's code path runs at a tiny size in the suite
    ".venv/bin/pip install -e '.[bench]'": "tests/test_throughput.py::test_benchmark_runs_end_to_end_at_tiny_size",
    ".venv/bin/python benchmarks/train_throughput.py --quick": "tests/test_throughput.py::test_benchmark_runs_end_to_end_at_tiny_size",
    ".venv/bin/python benchmarks/train_throughput.py": "tests/test_throughput.py::test_benchmark_runs_end_to_end_at_tiny_size",
    ".venv/bin/python benchmarks/train_throughput.py --shape quick --models normlab-pre,normlab-pre:attn=sdpa "
    "--dtypes bf16 --clock cpu --profile 2": "tests/test_throughput.py::test_benchmark_runs_end_to_end_at_tiny_size",
    ".venv/bin/normlab reproduce --scale quick": "tests/test_reproduce.py::test_smoke_reproduce_writes_the_report",
    ".venv/bin/normlab reproduce --scale full --out reproduce/quick":
        "tests/test_reproduce.py::test_full_on_a_folder_of_finished_quick_runs_trains_only_the_new_arms",
    ".venv/bin/normlab reproduce --scale full --out reproduce/full": "tests/test_reproduce.py::test_smoke_reproduce_writes_the_report",
    ".venv/bin/normlab reproduce --scale full --out reproduce/full --sync docs/results/reproduce-full/runs":
        "tests/test_reproduce.py::test_full_on_a_folder_of_finished_quick_runs_trains_only_the_new_arms",
    ".venv/bin/normlab reproduce --scale paper --corpus ~/iwslt14-de-en":
        "tests/test_reproduce.py::test_figure_subset_on_a_users_own_files",
    ".venv/bin/normlab reproduce --scale quick --figures fig3": "tests/test_reproduce.py::test_figure_subset_on_a_users_own_files",
    ".venv/bin/normlab reproduce --scale quick --report-only": "tests/test_reproduce.py::test_figure_subset_on_a_users_own_files",
    # translate/evaluate need a trained run; the tests train a tiny one and run the same commands on it
    'echo "Das ist ein Haus." | .venv/bin/normlab translate --run runs/pre': "tests/test_translate_cli.py::test_translate_streams_in_order",
    ".venv/bin/normlab translate --run runs/pre --input news.de --checkpoint last --beam 1":
        "tests/test_translate_cli.py::test_translate_streams_in_order",
    ".venv/bin/normlab evaluate --run runs/pre --split test": "tests/test_translate_cli.py::test_evaluate_writes_json",
    ".venv/bin/normlab evaluate --run runs/pre --split test --checkpoint avg:5":
        "tests/test_translate_cli.py::test_evaluate_and_translate_with_the_average_of_the_last_checkpoints",
    ".venv/bin/normlab evaluate --run runs/pre --source my.de --reference my.en":
        "tests/test_translate_cli.py::test_evaluate_on_your_own_files",
    "normlab train --config run.yaml --set model.placement=pre --set optim.lr=5e-4 --out runs/pre":
        "tests/test_train_cli.py::test_resume_and_config_file",
    "normlab train --out runs/pre --resume --set max_epochs=30": "tests/test_train_cli.py::test_resume_and_config_file",
    "torchrun --nproc_per_node 4 -m normlab train --config run.yaml --out runs/ddp":
        "tests/test_trainer.py::test_two_process_gloo_equals_one_process",
    "normlab train --nproc-per-node 4 --config run.yaml --out runs/ddp":
        "tests/test_faults.py::test_the_launcher_ends_a_rank_fault_with_its_one_line_and_code",
    "normlab train --config run.yaml --out runs/pre --threads 1": "tests/test_train_cli.py::test_threads_sets_the_runs_cpu_threads",
    # Data: the full corpora take up to a minute to prepare and write to ~/.cache; the tests run the same
    # commands on small corpora with a temporary cache.
    ".venv/bin/normlab data --task translation": "tests/test_data_cli.py::test_data_command",
    ".venv/bin/normlab data --task classification --set corpus=wic --set tokenizer=en-mono":
        "tests/test_data_cli.py::test_data_command_shared_tokenizer",
    # the CPU translation recipe (2 hours) and the long scale (hours a run): the tests run them at a tiny size
    ".venv/bin/normlab train --config de-en-cpu --out runs/de-en-cpu":
        "tests/test_translate_cli.py::test_de_en_cpu_recipe_from_start_to_test_bleu_then_translates",
    'echo "Erzeugt im aktuellen Dokument ein Diagramm." | .venv/bin/normlab translate --run runs/de-en-cpu '
    "--checkpoint last": "tests/test_translate_cli.py::test_de_en_cpu_recipe_from_start_to_test_bleu_then_translates",
    ".venv/bin/normlab reproduce --scale long":
        "tests/test_reproduce.py::test_long_on_the_smoke_model_runs_one_at_a_time_and_reports_test_bleu",
    # BERT: hours of pre-training and a grid of fine-tuning runs; the tests run the same commands on small corpora
    ".venv/bin/normlab train --config bert-tiny-post --out runs/bert-tiny-post":
        "tests/test_finetune.py::test_pretraining_lowers_validation_loss",
    ".venv/bin/normlab train --config bert-tiny-pre --out runs/bert-tiny-pre":
        "tests/test_finetune.py::test_finetune_cli_tiny_grid_then_skips_finished_runs",
    ".venv/bin/normlab finetune --from runs/bert-tiny-post --task paraphrase --scale small":
        "tests/test_finetune.py::test_finetune_beats_the_majority_class",
    ".venv/bin/normlab finetune --from runs/bert-tiny-pre/checkpoints/update_00004000 --task wic --scale small":
        "tests/test_finetune.py::test_interrupted_run_resumes_from_its_checkpoint",
    ".venv/bin/normlab export-hf --run runs/bert-tiny-post --out runs/bert-tiny-post-hf":
        "tests/test_finetune.py::test_export_hf_cli",
    # grids on a cluster: the same grid through a 2-worker Ray cluster and through submitit (a single-node SLURM
    # where slurm-wlm is installed), bit for bit as the local launcher
    ".venv/bin/pip install -e '.[ray]'": "tests/test_launchers.py::test_ray_gives_the_local_runs_bit_for_bit",
    ".venv/bin/normlab reproduce --scale full --out /shared/full --launcher ray --ray-address auto":
        "tests/test_launchers.py::test_ray_gives_the_local_runs_bit_for_bit",
    ".venv/bin/pip install -e '.[slurm]'": "tests/test_launchers.py::test_slurm_gives_the_local_runs_bit_for_bit",
    ".venv/bin/normlab reproduce --scale full --out /shared/full --launcher slurm --slurm-partition gpu --slurm-time "
    "120 --gpus-per-run 1": "tests/test_launchers.py::test_slurm_gives_the_local_runs_bit_for_bit",
    ".venv/bin/normlab finetune --from /shared/bert-tiny-post --task paraphrase --scale small --out /shared/ft "
    "--launcher slurm --slurm-partition gpu --gpus-per-run 1":
        "tests/test_finetune_launchers.py::test_submitit_local_gives_the_local_runs_bit_for_bit",
    # language models: the tests train a tiny one and run the same commands on it
    ".venv/bin/normlab train --out runs/lm-pre --set data.task=lm --set model.placement=pre --set model.positional=rope "
    "--set model.decoder_layers=3 --set model.d_model=128 --set model.d_ffn=512 --set model.scale_embedding=false "
    "--set model.activation=gelu --set optim.name=adamw --set optim.lr=3e-3 --set schedule.warmup_updates=40 "
    "--set schedule.decay=linear --set max_updates=400": "tests/test_lm.py::test_train_evaluate_generate_cli",
    ".venv/bin/normlab evaluate --run runs/lm-pre --split valid": "tests/test_lm.py::test_train_evaluate_generate_cli",
    ".venv/bin/normlab evaluate --run runs/lm-pre --text my-notes.txt": "tests/test_lm.py::test_train_evaluate_generate_cli",
    '.venv/bin/normlab generate --run runs/lm-pre --prompt "The history of" --samples 3 --temperature 0.8 --top-k 40':
        "tests/test_lm.py::test_train_evaluate_generate_cli",
    ".venv/bin/normlab sweep --scale quick --set task=lm --out runs/sweep-lm": "tests/test_lm.py::test_smoke_lm_sweep_cli",
    ".venv/bin/normlab sweep --scale lm --out runs/sweep-lm-schemes":
        "tests/test_sweep.py::test_the_lm_preset_runs_every_scheme_the_issue_names_at_a_depth_where_mixln_differs",
    ".venv/bin/normlab export-hf --run runs/gpt2-like --out runs/gpt2-like-hf":
        "tests/test_lm.py::test_train_evaluate_generate_cli",
}
# "Install as a package": the wheel test runs the block's lines itself (a wheel, a fresh venv, minutes)
COVERED.update({line: "tests/test_wheel.py::test_readme_install_as_a_package" for line in README_INSTALL})


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def _shell_lines() -> list[str]:
    lines = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def test_readme_has_commands():
    assert _shell_lines() and _blocks("python")


@pytest.mark.parametrize("code", _blocks("python"))
def test_python_blocks_run(code, capsys):
    if "transformers" in code:  # the Hugging Face example needs the optional `hf` extra
        require_reference("transformers", "pip install 'normlab[hf]' (make install does)")
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out


def _parses(line: str) -> None:
    """A normlab command line (after a pipe, or after ``-m normlab``) parses with normlab's own parser, a
    benchmark's (``python benchmarks/NAME.py ...``) with that benchmark's ``build_parser``."""
    from normlab.cli import build_parser

    argv = shlex.split(line.split("|")[-1].split("&&")[-1])
    script = next((a for a in argv[1:2] if a.startswith("benchmarks/") and a.endswith(".py")), None)
    if argv and argv[0].endswith("python") and script:
        import importlib.util

        spec = importlib.util.spec_from_file_location(Path(script).stem, ROOT / script)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        try:
            module.build_parser().parse_args(argv[2:])
        except SystemExit as e:
            pytest.fail(f"README command does not parse with {script}'s parser ({e.code}): {line}")
        return
    if "normlab" in argv and argv[0] != "make" and not argv[0].endswith("normlab"):
        argv = argv[argv.index("normlab") :]  # torchrun ... -m normlab train ...
    if not argv or not argv[0].endswith("normlab"):
        return
    try:
        build_parser().parse_args(argv[1:])
    except SystemExit as e:
        pytest.fail(f"README command does not parse ({e.code}): {line}")


@pytest.mark.parametrize("line", _shell_lines())
def test_shell_lines(line):
    if line in COVERED:
        path, _, name = COVERED[line].partition("::")
        assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), f"{line}: {COVERED[line]} is missing"
        _parses(line)  # the long job is not run, but its flags must exist
        return
    argv = shlex.split(line)
    if argv[0] == "make":
        out = subprocess.run(["make", "-n", *argv[1:]], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return
    if argv[0].endswith("normlab"):
        # a command that starts training must be mapped to the test that runs it small: run here at its README
        # size it could take a day (an unmapped `reproduce --scale full` once started inside the suite)
        long = {"reproduce", "train", "sweep", "finetune", "analyze"}
        assert not long & set(argv[1:2]), f"README line starts a long job and is not in COVERED: {line}"
        out = subprocess.run([sys.executable, "-m", "normlab", *argv[1:]], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return
    pytest.fail(f"README command not exercised by any test: {line}")
