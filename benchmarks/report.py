"""The benchmark's console report (--json prints the same dict instead)."""

from __future__ import annotations

from typing import Any


def print_report(report: dict[str, Any]) -> None:
    m = report["machine"]
    peak = m["peak_matmul_flops"]
    print(
        f"torch {m['torch']}, {m['threads']} threads, fp32 CPU; matmul peak {peak / 1e9:.0f} GFLOP/s "
        f"(start {m['peak_start'] / 1e9:.0f}, end {m['peak_end'] / 1e9:.0f}); "
        f"load average {m['loadavg_start']} -> {m['loadavg_end']}"
    )
    if report.get("overrides"):
        print("overrides: " + ", ".join(f"{k}={v}" for k, v in report["overrides"].items()))
    for name, s in report["shapes"].items():
        print(f"\n{name}: {s['describe']}; {s['rounds']} rounds x {s['steps']} steps (+{s['warmup']} warm-up)")
        print(
            f"  {'variant':26s} {'ms/step':>8s} {'ratio':>6s} {'MFU':>6s} {'min ms':>8s} {'ratio':>6s}  rounds' ratios"
        )
        for vname, v in s["variants"].items():
            mfu = v["flops_per_step"] / (v["ms_per_step"] / 1e3) / peak
            rr = " ".join(f"{r:.3f}" for r in v["round_ratios"])
            print(
                f"  {vname:26s} {v['ms_per_step']:8.1f} {v['ratio']:6.3f} {100 * mfu:5.1f}% {v['ms_min']:8.1f} "
                f"{v['ratio_min']:6.3f}  {rr}   {v['note']}"
            )
        if "compile" in s:
            c = s["compile"]
            print(
                f"  compile: {c['compile_s']:.1f} s extra on the first step, steady speed-up {c['speedup']:.3f}x; "
                f"bitwise run-to-run {c['bitwise_repeat']}, run_with_cache {c['run_with_cache_ok']}, "
                f"run_with_hooks {c['run_with_hooks_ok']}, "
                f"state_dict keys unchanged {c['state_dict_keys_unchanged']}"
            )
        if "costs" in s:
            print(
                f"  the trainer's other work at {name}'s intervals, timed one by one (per step of the run; "
                "ratio to the reference step):"
            )
            for cname, c in s["costs"].items():
                print(
                    f"    {cname:18s} {c['seconds_each']:7.3f} s x {c['count']:3d} = "
                    f"{c['ms_per_step']:6.1f} ms/step  {c['ratio_to_reference']:.3f}x"
                )
        if "trainer" in s:
            t = s["trainer"]
            print(
                f"  Trainer.run() ({t['steps']} steps, probes on; {t['reference_samples']} reference steps "
                f"interleaved, median {t['reference_ms']:.1f} ms):"
            )
            print(f"    steady-state step  {t['steady_ms_per_step']:9.1f} ms  {t['steady_ratio']:.3f}x")
            print(
                f"    whole run per step {t['whole_run_ms_per_step']:9.1f} ms  {t['whole_run_ratio']:.3f}x  "
                f"({t['steps_per_minute']:.0f} steps/min)"
            )
        if "memory" in s:
            mem = s["memory"]
            print(
                f"  peak RSS: imports only {mem['imports_mb']:.0f} MB, reference step {mem['reference_mb']:.0f} MB, "
                f"ResidualGPT step {mem['residual_gpt_mb']:.0f} MB"
            )
            if "trainer_run_mb" in mem:
                print(
                    f"  python -m training --preset {name} ({mem['steps']} steps): peak RSS "
                    f"{mem['trainer_run_mb']:.0f} MB, {mem['command_wall_s']:.1f} s in all "
                    f"({mem['run_wall_s']:.1f} s in the run, the rest imports, data, model build)"
                )
