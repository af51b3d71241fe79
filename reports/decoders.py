"""Tables for multi-token decoders (speculative, lookahead): speed-up over vanilla, tokens
per step and acceptance, per prompt category, and the simulator beside the real run.

Runs are paired by configuration (`reports.matching`); a run without a partner shows a
dash where the comparison would go.
"""

from __future__ import annotations

from reports.collect import RunData
from reports.content import Table
from reports.matching import twin_is_calibrated, twin_pairs, vanilla_baseline
from reports.tables import MISSING, format_number, run_name
from workbench.lossless import Lossless, lossless_verdict
from workbench.metrics import Number
from workbench.metrics.decoder import MAX_POSITIONS


def decoder_tables(runs: list[RunData]) -> list[Table]:
    """The decoder tables that apply to `runs` (none without a run that drafted tokens;
    APAR runs that speculate have the APAR section, their answers being APAR's own)."""
    drafting = [
        run for run in runs if "acceptance_rate" in run.summary and run.run["decoder"] != "apar"
    ]
    tables = [speedup_table(drafting, runs)] if drafting else []
    categorised = [run for run in drafting if run.by_category]
    if categorised:
        tables.append(category_table(categorised, runs))
    return tables


def _ratio(numerator: Number, denominator: Number) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return float(numerator) / float(denominator)


def _positions(run: RunData) -> str:
    rates = [run.summary.get(f"acceptance_at_position_{i}") for i in range(1, MAX_POSITIONS + 1)]
    shown = [format_number(rate, 2) for rate in rates if rate is not None]
    return " ".join(shown) or MISSING


def _lossless(run: RunData, vanilla: RunData | None) -> Lossless:
    """Greedy output equal to the vanilla twin's, from the stored outputs."""
    if vanilla is None:
        return Lossless("n/a", "no vanilla run")
    temperature = float(run.config.get("decoder", {}).get("temperature", 0.0) or 0.0)
    return lossless_verdict(temperature, str(run.run["backend"]), run.outputs, vanilla.outputs)


def speedup_table(drafting: list[RunData], runs: list[RunData]) -> Table:
    rows = []
    for run in drafting:
        s = run.summary
        base = vanilla_baseline(run, runs)
        b = base.summary if base is not None else {}
        rows.append([
            run_name(run),
            str(run.run["backend"]),
            str(run.run["decoder"]),
            base.label if base is not None else MISSING,
            _lossless(run, base).cell(),
            format_number(s.get("mean_tokens_per_decode_step"), 2),
            format_number(s.get("acceptance_rate"), 3),
            _positions(run),
            format_number(s.get("extra_flops_share"), 2),
            format_number(s.get("mean_tpot_ms"), 2),
            format_number(s.get("mean_itl_ms"), 2),
            format_number(_ratio(b.get("mean_tpot_ms"), s.get("mean_tpot_ms")), 2),
            format_number(_ratio(s.get("output_throughput"), b.get("output_throughput")), 2),
        ])  # fmt: skip
    return Table(
        title="Multi-token decoders: speed-up over vanilla",
        headers=[
            "Run",
            "Backend",
            "Decoder",
            "Vanilla run",
            "Lossless",
            "Tokens/step",
            "Acceptance",
            "Acceptance by position",
            "Extra FLOPs",
            "Mean TPOT (ms)",
            "Mean ITL (ms)",
            "TPOT speed-up",
            "Output tok/s ratio",
        ],
        rows=rows,
        text_columns=5,
        row_titles=[f"run {run.run_id}" for run in drafting],
        note="Vanilla run: the latest vanilla run with the same configuration but for its "
        "name, decoder, SLOs, sweep and simulator options. TPOT speed-up = its mean TPOT / "
        "this run's. Tokens/step: per decoding sequence and step (prefill emissions left "
        "out). Acceptance = accepted / drafted tokens; by position: P(accepted ≥ i | drafted "
        "≥ i). Extra FLOPs: decode tokens computed per token emitted, less 1. ITL: the gap "
        "between a request's emissions, a multi-token step's tokens arriving together (so "
        "ITL ≥ TPOT when steps emit several). Lossless: every request's stored output equals "
        "the vanilla run's token for token (greedy real runs), else the first difference.",
    )


def category_table(runs: list[RunData], all_runs: list[RunData]) -> Table:
    rows, titles = [], []
    for run in runs:
        base = vanilla_baseline(run, all_runs)
        for category, stats in run.by_category.items():
            vanilla = base.by_category.get(category, {}) if base is not None else {}
            titles.append(f"run {run.run_id}")
            rows.append([
                run_name(run),
                str(run.run["decoder"]),
                category,
                format_number(stats["completed"], 0),
                format_number(stats["mean_tokens_per_decode_step"], 2),
                format_number(stats["mean_tpot_ms"], 2),
                format_number(vanilla.get("mean_tpot_ms"), 2),
                format_number(_ratio(vanilla.get("mean_tpot_ms"), stats["mean_tpot_ms"]), 2),
            ])  # fmt: skip
    return Table(
        title="Multi-token decoders by prompt category",
        headers=[
            "Run",
            "Decoder",
            "Category",
            "Completed",
            "Tokens/step",
            "Mean TPOT (ms)",
            "Vanilla TPOT (ms)",
            "TPOT speed-up",
        ],
        rows=rows,
        text_columns=3,
        row_titles=titles,
        note="Requests carrying a prompt category (workload.prompts); the vanilla column is "
        "the same category in the run's vanilla baseline.",
    )


def _error(sim: Number, real: Number) -> str:
    ratio = _ratio(sim, real)
    return MISSING if ratio is None else f"{100.0 * (ratio - 1.0):+.1f}%"


def sim_vs_real_table(runs: list[RunData]) -> Table | None:
    """Each real run beside its simulator twin (None without any pair); an uncalibrated
    twin is marked as such."""
    rows, titles = [], []
    for real, twin in twin_pairs(runs):
        r, s = real.summary, twin.summary
        calibrated = "" if twin_is_calibrated(twin) else " (uncalibrated)"
        titles.append(f"real run {real.run_id}, simulated run {twin.run_id}")
        row = [run_name(real), run_name(twin), twin.cost_model + calibrated]
        for key, decimals in (
            ("mean_tokens_per_decode_step", 2),
            ("mean_tpot_ms", 2),
            ("output_throughput", 1),
        ):
            row += [format_number(r.get(key), decimals), format_number(s.get(key), decimals)]
            row.append(_error(s.get(key), r.get(key)))
        rows.append(row)
    if not rows:
        return None
    return Table(
        title="Simulator vs real",
        headers=[
            "Real run",
            "Sim run",
            "Sim cost model",
            "Tokens/step real",
            "sim",
            "error",
            "Mean TPOT real (ms)",
            "sim",
            "error",
            "Output tok/s real",
            "sim",
            "error",
        ],
        rows=rows,
        text_columns=3,
        row_titles=titles,
        note="Sim run: the latest simulated run with the real run's configuration but for "
        "its backend, name, SLOs, sweep, simulator options, cost model and the decoder's "
        "simulator-only fields (acceptance, tokens_per_step, calibrate_from). Error = sim / "
        "real − 1. Tokens/step is blank for vanilla runs. An uncalibrated sim run is priced by "
        "a cost model not fitted to the real run's device: its times are not a prediction of "
        "the real run's, only the schedule and token counts compare.",
    )
