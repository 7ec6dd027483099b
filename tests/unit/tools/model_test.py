#!/usr/bin/env python3
"""tools/skt-model against the published case (Tang et al.: 160,000 processes, groups of 16,
checkpoint and recovery 20 s, interval 13.6 min, system MTBF 5 h, a 100 h run: self-checkpoint
completes with probability > 99 %, single checkpointing about 61 %) and hand-computed values."""

import importlib.machinery
import importlib.util
import math
import os
import random
import subprocess
import sys
import tempfile
import types
import unittest

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools", "skt-model")
loader = importlib.machinery.SourceFileLoader("skt_model", TOOL)
spec = importlib.util.spec_from_loader("skt_model", loader)
model = importlib.util.module_from_spec(spec)
loader.exec_module(model)

PUBLISHED = dict(processes=160000, group=16, cost=20.0, recovery=20.0, interval=13.6 * 60,
                 mtbf=5 * 3600.0, hours=100.0)


class Memory(unittest.TestCase):
    def test_fractions_by_hand(self):
        self.assertAlmostEqual(model.usable_fraction("self", 16, 1), 15 / 32)
        self.assertAlmostEqual(model.usable_fraction("double", 16, 1), 15 / 47)
        self.assertAlmostEqual(model.usable_fraction("single", 16, 1), 15 / 31)
        self.assertAlmostEqual(model.usable_fraction("self", 8, 2), 6 / 16)
        with self.assertRaises(ValueError):
            model.usable_fraction("self", 4, 4)

    def test_largest_n_fits_and_is_valid(self):
        per_rank = 8 * 1024 ** 3
        n = model.largest_n(per_rank, 192, 2, 1)
        step = model.partition_step(192, 2, 1)
        self.assertEqual(step, 384)
        self.assertEqual(n % step, 0)
        share = lambda m: 8 * m * (m + 1) / 2
        self.assertLessEqual(share(n), per_rank)
        self.assertGreater(share(n + step), per_rank)

    def test_sizes(self):
        self.assertEqual(model.parse_size("64G"), 64 * 1024 ** 3)
        self.assertEqual(model.parse_size("512"), 512)


class Interval(unittest.TestCase):
    def test_young_and_daly_by_hand(self):
        # sqrt(2 * 20 * 18000) = 848.528; Daly: 848.528 * (1 + sqrt(r)/3 + r/9) - 20, r = 20/36000.
        self.assertAlmostEqual(model.young(20, 18000), 848.5281, places=3)
        r = 20 / 36000
        self.assertAlmostEqual(model.daly(20, 18000), 848.5281374 * (1 + math.sqrt(r) / 3 + r / 9) - 20, places=6)
        self.assertAlmostEqual(model.daly(20, 18000), 835.247, places=2)
        self.assertEqual(model.daly(50, 20), 20)  # cost >= 2 MTBF: the interval is the MTBF

    def test_efficiency_is_highest_near_the_optimum(self):
        best = model.daly(20, 18000)
        at_best = model.efficiency(best, 20, 18000, 20)
        for other in (best / 4, best * 4):
            self.assertLess(model.efficiency(other, 20, 18000, 20), at_best)


class Reliability(unittest.TestCase):
    def test_published_case_closed_form(self):
        self_ckpt = model.reliability_closed("self", **PUBLISHED)
        single = model.reliability_closed("single", **PUBLISHED)
        self.assertGreater(self_ckpt, 0.99)
        self.assertAlmostEqual(single, 0.61, delta=0.02)

    def test_published_case_simulated(self):
        rng = random.Random(7)
        single = model.reliability_simulated("single", trials=4000, rng=rng, **PUBLISHED)
        self_ckpt = model.reliability_simulated("self", trials=2000, rng=rng, **PUBLISHED)
        self.assertAlmostEqual(single, 0.61, delta=0.03)
        self.assertGreater(self_ckpt, 0.99)

    def test_simulation_agrees_where_losses_are_frequent(self):
        # Tiny groups and a long recovery make two losses in a group common: both ways must agree.
        case = dict(processes=64, group=4, cost=20.0, recovery=600.0, interval=600.0, mtbf=3600.0, hours=24.0)
        closed = model.reliability_closed("self", **case)
        simulated = model.reliability_simulated("self", trials=4000, rng=random.Random(3), **case)
        self.assertGreater(1 - closed, 0.1)
        self.assertAlmostEqual(simulated, closed, delta=0.03)


class Spares(unittest.TestCase):
    def test_slowdown_by_hand(self):
        # 4 nodes of 2 ranks: one lost, its 2 ranks on two others, which run 3 (1.5x); two lost,
        # 8 ranks on 2 nodes (2x); every node lost: no run.
        self.assertEqual(model.slowdown(4, 2, 0), 1)
        self.assertEqual(model.slowdown(4, 2, 1), 1.5)
        self.assertEqual(model.slowdown(4, 2, 2), 2)
        self.assertEqual(model.slowdown(4, 2, 4), math.inf)
        self.assertAlmostEqual(model.slowdown(10000, 16, 1), 17 / 16)

    def test_completion_closed_form(self):
        case = dict(processes=160000, group=16, recovery=20.0, mtbf=5 * 3600.0, hours=100.0)
        degraded = model.completion_closed(0, True, **case)
        # Going on, only a second failure in a group during its recovery ends the run.
        self.assertGreater(degraded, 0.99)
        # Stopping with no spare needs no failure in 100 h (20 expected): e^-20, about 2e-9.
        self.assertAlmostEqual(model.completion_closed(0, False, **case), math.exp(-20), delta=1e-10)
        # With spares well beyond the failures, stopping never happens: the two agree.
        self.assertAlmostEqual(model.completion_closed(80, False, **case), degraded, places=9)
        stops = [model.completion_closed(s, False, **case) for s in (0, 8, 16, 24, 32)]
        self.assertEqual(stops, sorted(stops))

    def test_simulation_agrees_and_degraded_pays_the_slowdown(self):
        # 128 nodes of 2 ranks, 10 failures expected.
        o = types.SimpleNamespace(processes=256, ranks_per_node=2, group=8, cost=1.0, recovery=1.0,
                                  interval=30.0, mtbf=3600.0, hours=10.0, trials=2000)
        rng = random.Random(3)
        for spares in (0, 5, 10, 20):
            closed = model.completion_closed(spares, False, o.processes, o.group, o.recovery, o.mtbf,
                                             o.hours)
            simulated, _ = model.spares_simulated(spares, False, o, rng)
            self.assertAlmostEqual(simulated, closed, delta=0.035)
        # Holding enough spares costs 30 of 158 nodes; going on with none completes as often, the
        # run slowed 1.5x from its first loss on (3 ranks on the busiest node, not 2).
        _, enough = model.spares_simulated(30, False, o, random.Random(3))
        self.assertAlmostEqual(enough, 128 / 158 * 0.98, delta=0.02)
        completed, degraded = model.spares_simulated(0, True, o, rng)
        self.assertGreater(completed, 0.99)
        self.assertLess(degraded, 0.98 / 1.5 * 1.1)
        self.assertGreater(degraded, 0.98 / 1.5 * 0.9)


class HplEfficiency(unittest.TestCase):
    def test_fit_recovers_the_curve(self):
        a, b = 1.1, 2500.0
        points = [(n, model.efficiency_at(n, a, b)) for n in (4000, 8000, 16000, 32000)]
        fa, fb = model.fit_efficiency(points)
        self.assertAlmostEqual(fa, a, places=9)
        self.assertAlmostEqual(fb, b, places=5)
        with self.assertRaises(ValueError):
            model.fit_efficiency([(1000, 0.5)])


class CommandLine(unittest.TestCase):
    def run_tool(self, *args):
        return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)

    def test_csv_and_errors(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "m.csv")
            done = self.run_tool("memory", "--groups", "4,16", "--csv", out)
            self.assertEqual(done.returncode, 0, done.stderr)
            with open(out) as f:
                self.assertEqual(f.readline().strip(), "mode,G,m,usable")
        self.assertEqual(self.run_tool("interval", "--cost", "1", "--mtbf", "0").returncode, 2)
        self.assertEqual(self.run_tool("hpl-efficiency").returncode, 2)
        self.assertEqual(self.run_tool("memory", "--groups", "a,b").returncode, 2)
        self.assertEqual(self.run_tool("spares", "--ranks-per-node", "0").returncode, 2)
        done = self.run_tool("spares", "--spares", "0,64", "--trials", "50")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("20.0 node failures expected", done.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
