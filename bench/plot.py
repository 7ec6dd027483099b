#!/usr/bin/env python3
"""Draws the PNG plots of a benchmark directory (encode.csv, checkpoint.csv, checkpoint-changes.csv,
tracking.csv, kernels.csv, hpl.csv) with
gnuplot: one plot per CSV found, next to it."""

import csv
import pathlib
import shutil
import subprocess
import sys


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


MISSING = "gnuplot is not installed (Debian: gnuplot-nox)"


def warn_if_missing():
    """Said before a long benchmark, so that its plot is not found missing only at the end."""
    if shutil.which("gnuplot") is None:
        print(f"{MISSING}: the tables and CSV files are written, the PNG plots are not", flush=True)


def written(*paths):
    """'wrote A, B and C' of those of the paths that exist (a PNG is missing without gnuplot)."""
    names = [str(p) for p in paths if pathlib.Path(p).exists()]
    return "wrote " + (", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names))


def gnuplot(script, data_blocks):
    # The tables and CSV files are the results; a machine without gnuplot still gets them.
    if shutil.which("gnuplot") is None:
        output = next((line for line in script.splitlines() if line.startswith("set output")), "")
        print(f"{MISSING}: not drawn: {output[len('set output '):]}", file=sys.stderr)
        return
    text = ""
    for name, lines in data_blocks.items():
        text += f"${name} << EOD\n" + "\n".join(lines) + "\nEOD\n"
    subprocess.run(["gnuplot"], input=text + script, text=True, check=True)


def series(table, key_columns, x, y):
    out = {}
    for r in table:
        key = " ".join(r[c] for c in key_columns)
        out.setdefault(key, []).append(f"{r[x]} {r[y]}")
    return out


def block_name(key):
    return "d_" + "".join(ch if ch.isalnum() else "_" for ch in key)


def line_plot(png, title, xlabel, ylabel, groups, extra=""):
    blocks = {block_name(k): v for k, v in groups.items()}
    plots = ", ".join(f'${block_name(k)} using 1:2 with linespoints lw 2 title "{k}"' for k in groups)
    gnuplot(f"""set terminal pngcairo size 900,560 font "sans,11"
set output "{png}"
set title "{title}"
set xlabel "{xlabel}"
set ylabel "{ylabel}"
set key outside right
set grid
set logscale x 2
{extra}
plot {plots}
""", blocks)


def histogram(png, title, ylabel, lines, extra, columns):
    gnuplot(f"""set terminal pngcairo size 1000,600 font "sans,11"
set output "{png}"
set title "{title}"
set style data histograms
set style fill solid 0.8 border -1
set ylabel "{ylabel}"
set grid ytics
{extra}
plot $h {columns}
""", {"h": lines})


def main(directory):
    d = pathlib.Path(directory)
    made = []
    if (d / "encode.csv").exists():
        t = rows(d / "encode.csv")
        line_plot(d / "encode.png", "Group encoding time / memcpy of the same bytes",
                  "group size G", "encode / memcpy", series(t, ["scheme", "m"], "G", "encode/memcpy"))
        made.append("encode.png")
    if (d / "checkpoint.csv").exists():
        t = rows(d / "checkpoint.csv")
        line_plot(d / "checkpoint.png", "Full checkpoint time / memcpy of the workspace",
                  "group size G", "checkpoint / memcpy",
                  series(t, ["mode", "scheme", "m"], "G", "ckpt/memcpy"))
        line_plot(d / "recovery.png", "Recovery of one lost node / checkpoint time",
                  "group size G", "recovery / checkpoint",
                  series(t, ["mode", "scheme", "m"], "G", "recover/ckpt"))
        measured = {}
        for r in t:
            if r["scheme"] == "xor":
                measured.setdefault(f"{r['mode']} measured", []).append(f"{r['G']} {r['mem_usable']}")
        blocks = {block_name(k): v for k, v in measured.items()}
        plots = ", ".join(f'${block_name(k)} using 1:2 with points pt 7 ps 1.5 title "{k}"'
                          for k in measured)
        gnuplot(f"""set terminal pngcairo size 900,560 font "sans,11"
set output "{d / 'memory.png'}"
set title "Share of memory left to the application (xor)"
set xlabel "group size G"
set ylabel "usable fraction"
set key outside right
set grid
set xrange [2:20]
plot (x-1)/(2*x) lw 2 title "self (G-1)/(2G)", (x-1)/(3*x-1) lw 2 title "double (G-1)/(3G-1)", \\
     (x-1)/(2*x-1) lw 2 title "single (G-1)/(2G-1)", {plots}
""", blocks)
        made += ["checkpoint.png", "recovery.png", "memory.png"]
    if (d / "checkpoint-changes.csv").exists():
        t = rows(d / "checkpoint-changes.csv")
        lines = [f'"{r["scheme"]} m={r["m"]} G={r["G"]}" 1 {r["found/full"]} {r["static/full"]}' for r in t]
        histogram(d / "checkpoint-changes.png",
                  "Checkpoint time / full checkpoint: a third static, the rest changed", "ratio", lines,
                  "set key outside right\nset yrange [0:*]",
                  "using 2:xtic(1) title 'full', '' using 3 title 'changes found', "
                  "'' using 4 title 'changes found, static marked'")
        made.append("checkpoint-changes.png")
    if (d / "tracking.csv").exists():
        t = rows(d / "tracking.csv")
        tracked = [r for r in t if r["tracking_s"] != "-"]
        groups = {"comparing with the copy": [f'{r["rewritten_%"]} {r["compare_s"]}' for r in t]}
        if tracked:
            groups["kernel write tracking (faults + scan)"] = [
                f'{r["rewritten_%"]} {r["tracking_s"]}' for r in tracked]
        line_plot(d / "tracking.png", "Finding what changed in the workspace",
                  "share of the workspace rewritten (%)", "seconds", groups, "unset logscale x")
        made.append("tracking.png")
    if (d / "kernels.csv").exists():
        t = rows(d / "kernels.csv")
        # The CRC rows have no parity count.
        lines = [f'"{r["scheme"]}{"" if r["m"] == "-" else " m=" + r["m"]}" {r["kernel_GBs"]} '
                 f'{r["raw_isal_GBs"].replace("-", "0")} {r["memcpy_GBs"]}' for r in t]
        histogram(d / "kernels.png", "Local kernels, one core (GB/s of input)", "GB/s", lines,
                  "set key outside right\nset xtics rotate by -25",
                  "using 2:xtic(1) title 'selfckpt kernel', '' using 3 title 'ISA-L directly', "
                  "'' using 4 title 'memcpy'")
        made.append("kernels.png")
    if (d / "hpl.csv").exists():
        t = [r for r in rows(d / "hpl.csv") if r["Gflops"] not in ("-", "0.00")]
        lines = [f'"{r["run"]}: {r["what"]}" {r["Gflops"]}' for r in t]
        histogram(d / "hpl.png", "SKT-HPL, PDGESV and the DGEMM rate (Gflops)", "Gflops", lines,
                  "set key off\nset xtics rotate by -35\nset yrange [0:*]", "using 2:xtic(1)")
        made.append("hpl.png")
    if (d / "drain.csv").exists():
        t = rows(d / "drain.csv")
        lines = [f'"{r["ranks"]} ranks, {r["MiB/rank"]} MiB each" {r["drain MB/s"]} {r["plain MB/s"]}' for r in t]
        histogram(d / "drain.png", "Writing a committed copy to storage, per rank (MB/s)", "MB/s", lines,
                  "set key outside right\nset yrange [0:*]",
                  "using 2:xtic(1) title 'drained file (CRCs, sync, rename)', '' using 3 title 'plain file'")
        made.append("drain.png")
    print("plots: " + ", ".join(str(d / m) for m in made))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
