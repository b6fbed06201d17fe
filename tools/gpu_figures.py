"""The course's GPU figures in one run, on a machine with a CUDA GPU:

    python tools/gpu_figures.py --out runs/gpu-figures

1. the GPU recipe (tfcourse.training.recipes.GPU_RECIPE: 6 layers, 6 heads, d_model 384, context 256,
   batch 64, bf16, torch.compile) on Tiny Shakespeare: the best and final validation loss, the wall
   time at which the validation loss first reaches --target (1.47: nanoGPT's README reports 1.4697), with and without
   the first step (where torch.compile compiles), tokens/s and MFU;
2. the solutions of lessons 07 and 08 in full mode, lesson 09's translation run (its timing) and
   lesson 10's LSTM-against-Transformer timings (the GPU half of "parallel computation, measured"),
   each cell timed; the printed output goes to <out>/<lesson>.log.

Lessons run through nbclient when Jupyter is installed; on a machine with PyTorch alone their code
cells run in order in one Python namespace (IPython's Markdown replaced by print). Everything printed
is also written to <out>/figures.log.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LESSONS = ["07_decoding", "08_training", "09_translation", "10_rnn_vs_transformer"]


def log(out: Path, text: str) -> None:
    print(text, flush=True)
    with open(out / "figures.log", "a", encoding="utf-8") as f:
        f.write(text + "\n")


def run_recipe(out: Path, checkpoints: Path, target: float, steps: int | None = None,
               eval_steps: int | None = None) -> dict:
    """The GPU recipe, as `python -m tfcourse.training.shakespeare --recipe gpu` trains it, plus the
    wall time of each evaluation (for the time to `target`)."""
    import torch

    from tfcourse.training import shakespeare as run

    args = run.build_parser().parse_args(["--recipe", "gpu", "--quiet", "--out", str(checkpoints)]
                                         + (["--steps", str(steps)] if steps else [])
                                         + (["--eval-steps", str(eval_steps)] if eval_steps else []))
    device = run.pick_device(None)
    torch.set_float32_matmul_precision("high")
    recipe = run.configure(args, device)
    corpus = run.load_corpus(None).to(device)
    model = run.build_model(recipe, corpus.tokenizer.vocab_size, args.seed)
    n_params = run.non_embedding_parameters(model)
    log(out, f"torch {torch.__version__} on {torch.cuda.get_device_name() if device.type == 'cuda' else device}")
    log(out, run.describe_run(recipe, corpus, n_params, device))
    timer, started, marks = run.StepTimer(), time.perf_counter(), {}

    def on_step(step: int, history: dict) -> None:
        timer(step, history)
        if step == 1:
            if device.type == "cuda":
                torch.cuda.synchronize()
            marks["first_step"] = time.perf_counter() - started  # compilation happens here
        if history["eval_step"] and history["eval_step"][-1] == step:
            marks.setdefault("evals", []).append((step, history["val_loss"][-1], time.perf_counter() - started))

    history = run.train(model, corpus.batches(recipe.batch_size, recipe.context), recipe.train, on_step=on_step)
    figures = run.measure(history, timer, model, recipe, n_params, run.DEFAULT_PEAK_TFLOPS,
                          time.perf_counter() - started)
    log(out, run.report(figures, peak_is_default=True))
    reached = next(((s, v, t) for s, v, t in marks.get("evals", []) if v <= target), None)
    for step, val, seconds in marks.get("evals", []):
        log(out, f"  eval at step {step:5,}: val {val:.4f} at {seconds:6.1f} s")
    if reached is None:
        log(out, f"val never reached {target}: best {figures['best_val_loss']:.4f}")
    else:
        step, val, seconds = reached
        log(out, f"val {val:.4f} <= {target} first at step {step:,}: {seconds:.1f} s after the start of training, "
                 f"{seconds - marks['first_step']:.1f} s without the first step "
                 f"({marks['first_step']:.1f} s: torch.compile compiles the model there)")
    figures.update(first_step_seconds=marks.get("first_step"), evals=marks.get("evals"),
                   target=target, reached=reached,
                   gpu=torch.cuda.get_device_name() if device.type == "cuda" else str(device))
    (out / "recipe.json").write_text(json.dumps(figures, indent=1))
    return figures


def _without_ipython(source: str) -> str:
    """A cell's code for a machine without IPython: `from IPython.display import Markdown` becomes
    `Markdown = print` (the lessons display Markdown and nothing else from IPython)."""
    return re.sub(r"^from IPython\.display import (.+)$",
                  lambda m: " = ".join(n.strip() for n in m.group(1).split(",")) + " = print", source, flags=re.M)


def run_lesson_as_script(lesson: Path, out: Path) -> None:
    """Each code cell of the notebook in order, in one namespace, timed; output to <out>/<lesson>.log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_ipython = importlib.util.find_spec("IPython") is not None
    cells = [c for c in json.loads(lesson.read_text())["cells"] if c["cell_type"] == "code"]
    namespace = {"__name__": "__main__"}
    previous = os.getcwd()
    os.chdir(lesson.parent)  # lessons read their neighbours (../NN_topic/) from their own folder
    try:
        with open(out / f"{lesson.stem}.log", "w", encoding="utf-8") as logfile:
            for index, cell in enumerate(cells):
                source = "".join(cell["source"])
                source = source if has_ipython else _without_ipython(source)
                buffer = io.StringIO()
                started = time.perf_counter()
                with contextlib.redirect_stdout(buffer):
                    exec(compile(source, f"{lesson.name} code cell {index}", "exec"), namespace)  # noqa: S102
                    plt.close("all")
                seconds = time.perf_counter() - started
                logfile.write(f"--- code cell {index} ({seconds:.1f} s): {source.splitlines()[0][:80] if source else ''}\n")
                logfile.write(buffer.getvalue())
                logfile.flush()
    finally:
        os.chdir(previous)


def run_lessons(out: Path, lessons: list[str], fast: bool = False) -> None:
    if fast:
        os.environ["TFCOURSE_FAST"] = "1"
    else:
        os.environ.pop("TFCOURSE_FAST", None)  # full mode
    for name in lessons:
        path = ROOT / "solutions" / name / f"{name}.ipynb"
        started = time.perf_counter()
        try:
            run_lesson_as_script(path, out)
            log(out, f"{name}: ran in {'fast' if fast else 'full'} mode in {time.perf_counter() - started:.1f} s (log: {name}.log)")
        except Exception as error:  # report and go on with the next lesson
            log(out, f"{name}: FAILED after {time.perf_counter() - started:.1f} s: {type(error).__name__}: {error}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/gpu-figures"), help="where the logs go")
    parser.add_argument("--checkpoints", type=Path, help="the recipe's checkpoints (default: <out>/recipe)")
    parser.add_argument("--target", type=float, default=1.47, help="validation loss to time (default 1.47)")
    parser.add_argument("--lessons", nargs="*", default=LESSONS, help=f"lessons to run (default: {LESSONS})")
    parser.add_argument("--skip-recipe", action="store_true", help="run the lessons only")
    parser.add_argument("--steps", type=int, help="the recipe's steps (default: its own; a few to try this out)")
    parser.add_argument("--eval-steps", type=int, help="batches per loss estimate (default: the recipe's)")
    parser.add_argument("--fast", action="store_true", help="lessons in fast mode (to try this out on a CPU)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.skip_recipe:
        run_recipe(args.out, args.checkpoints or args.out / "recipe", args.target, args.steps, args.eval_steps)
    run_lessons(args.out, args.lessons, args.fast)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
