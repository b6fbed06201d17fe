"""Figures of lesson 13: data parallelism in one picture, and the ring all-reduce step by step."""

from __future__ import annotations

from .svg import HIGHLIGHT, INK, MUTED_INK, Drawing

WORKERS = 4


def data_parallel() -> Drawing:
    """A global batch cut into 4 shards; 4 copies of the model each compute a gradient on theirs;
    an all-reduce averages the 4 gradients; every copy takes the same optimizer step."""
    description = (
        f"Data parallelism with {WORKERS} workers. The global batch of B examples is cut into {WORKERS} "
        f"shards of B/{WORKERS}. Each worker holds a full copy of the model and computes, by forward and "
        f"backward on its own shard, the gradient g_r of its mean loss. An all-reduce replaces every g_r by "
        f"the mean g = (g_0 + g_1 + g_2 + g_3) / {WORKERS}, which equals the gradient on the whole batch. "
        f"Every worker then takes the same AdamW step with g, so the {WORKERS} copies stay identical.")
    drawing = Drawing(900, 470, "Data parallelism: shard, compute, all-reduce, step", description)
    drawing.box(250, 16, 400, 40, "global batch: B examples", fill="tokens", size=14, bold=True)
    column_w, gap = 190, 23
    left = (900 - WORKERS * column_w - (WORKERS - 1) * gap) / 2
    reduce_top = 300
    for r in range(WORKERS):
        x = left + r * (column_w + gap)
        centre = x + column_w / 2
        drawing.line([(450, 56), (450, 70), (centre, 70), (centre, 92)])
        drawing.box(x + 20, 94, column_w - 40, 32, f"shard {r}: B/{WORKERS}", fill="tokens", size=12.5)
        drawing.arrow(centre, 126, centre, 148)
        drawing.box(x, 150, column_w, 58, f"worker {r}: a full copy\nof the model", fill="norm", size=12.5)
        drawing.arrow(centre, 208, centre, 232)
        drawing.box(x + 20, 234, column_w - 40, 40, f"forward, backward\n→ gradient g_{r}", fill="attention",
                    size=12)
        drawing.arrow(centre, 274, centre, reduce_top - 2)
        drawing.arrow(centre, reduce_top + 56, centre, 388)
        drawing.box(x + 10, 390, column_w - 20, 40, "AdamW step with g", fill="training", size=12.5)
    drawing.box(left, reduce_top, WORKERS * column_w + (WORKERS - 1) * gap, 56,
                f"all-reduce:  g = (g_0 + g_1 + g_2 + g_3) / {WORKERS}   on every worker", fill="output",
                size=15, bold=True, stroke=HIGHLIGHT, width=2.2)
    drawing.text(450, 452, "the same g and the same step everywhere: the copies stay identical", size=12.5,
                 ink=MUTED_INK)
    return drawing


def _label(chunk: str, holders: frozenset[int], n: int) -> str:
    """What a worker holds of one chunk: "Σa" once every worker's part is summed in, else "a0+a2"."""
    return f"Σ{chunk}" if len(holders) == n else "+".join(f"{chunk}{w}" for w in sorted(holders))


def _ring_phases(n: int) -> list[tuple[str, list[list[str]]]]:
    """Each worker's chunks after every step, as tfcourse.parallel.simulate_ring_all_reduce moves them:
    at reduce-scatter step s worker i sends chunk (i - s) mod n; at all-gather step s, chunk (i + 1 - s) mod n."""
    names = "abcdefgh"[:n]
    held = [[frozenset({w}) for _ in range(n)] for w in range(n)]  # held[worker][chunk]: whose parts are summed

    def snapshot(title: str) -> tuple[str, list[list[str]]]:
        return title, [[_label(names[c], held[w][c], n) for c in range(n)] for w in range(n)]

    phases = [snapshot("start")]
    for step in range(n - 1):
        sent = [(i, (i - step) % n, held[i][(i - step) % n]) for i in range(n)]
        for i, c, parts in sent:
            held[(i + 1) % n][c] = held[(i + 1) % n][c] | parts
        phases.append(snapshot(f"reduce-scatter {step + 1}"))
    for step in range(n - 1):
        sent = [(i, (i + 1 - step) % n, held[i][(i + 1 - step) % n]) for i in range(n)]
        for i, c, parts in sent:
            held[(i + 1) % n][c] = parts
        phases.append(snapshot(f"all-gather {step + 1}"))
    return phases


def ring_all_reduce() -> Drawing:
    """Three workers in a ring, each tensor cut into three chunks: the two reduce-scatter steps and the
    two all-gather steps, chunk by chunk."""
    n = 3
    description = (
        f"A ring all-reduce of {n} workers whose tensors are cut into {n} chunks a, b, c. "
        f"Each step every worker sends one chunk to the next worker in the ring. "
        f"Reduce-scatter, {n - 1} steps: the receiver adds the chunk to its own, so after {n - 1} steps each "
        f"worker holds one chunk summed over all workers. All-gather, {n - 1} more steps: the summed chunks "
        f"travel round the ring until every worker has all of them. Each worker sends 2 ({n} - 1) = {2 * (n - 1)} "
        f"chunks of size/{n}; with N workers, 2 (N - 1) chunks of size/N, that is 2 (N - 1)/N of the tensor.")
    drawing = Drawing(900, 300, "The ring all-reduce, chunk by chunk", description)
    phases = _ring_phases(n)
    cell_w, cell_h, phase_w = 44, 30, 178
    for p, (title, rows) in enumerate(phases):
        x0 = 8 + p * phase_w
        drawing.text(x0 + 22 + 1.5 * cell_w, 24, title, size=12.5, bold=True)
        if p:
            drawing.text(x0 - 4, 24, "→", size=18, ink=HIGHLIGHT)
        for w, chunks in enumerate(rows):
            y = 50 + w * (cell_h + 38)
            drawing.text(x0 + 2, y + cell_h / 2, f"w{w}", size=11.5, anchor="start", ink=MUTED_INK)
            for c, label in enumerate(chunks):
                done = label.startswith("Σ")
                drawing.box(x0 + 22 + c * cell_w, y, cell_w, cell_h, label, fill="output" if done else "plain",
                            rounded=0, size=10, bold=done, ink=INK)
    drawing.text(450, 262, "each step: worker i sends one chunk (size/N) to worker i + 1;"
                 " N − 1 steps to sum, N − 1 to share", size=12.5, ink=MUTED_INK)
    drawing.text(450, 284, "bytes sent per worker: 2 (N − 1) · size / N  →  about 2 × size, however many workers",
                 size=12.5, bold=True)
    return drawing


__all__ = ["data_parallel", "ring_all_reduce"]
