"""The event simulator on large pools (1,000 req/s of coding for 20 s, hundreds to 1,667 machines) gives the
requests the times it gave before its routing kept each pool's machines in tournaments: the same machine
picked, the first of a pool on a tie. Each point keeps its completed requests and the sums of TTFT and E2E
over each quarter of the stream, made with the scan of every machine before that change (as
test_fluid_large_pools.py does for the fluid model)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

RTOL = 1e-9

#: (design, prompt machines, token machines, strict pools): completed, TTFT sums, E2E sums (quarters)
GOLDEN = {
    ('AA', 716, 60, False): (20142,
        [3534.0531344529422, 3494.3518306958395, 3490.0778470512496, 3638.1964659808145],
        [10522.692894407084, 10137.052811485328, 10791.759191917245, 10503.647644309756]),
    ('A100', 1667, 0, False): (20142,
        [3534.731487549123, 3520.8551802564007, 3531.157456698229, 3552.212989258005],
        [10718.596466440733, 10738.86065813415, 11457.79246781106, 10590.065268988259]),
    ('HH', 330, 12, False): (20142,
        [1692.5264365323799, 1865.5466040889567, 1936.2569298419878, 2148.1656522502126],
        [8802.574602445475, 10044.87332074102, 10504.168610293644, 9391.3903893979]),
    ('AA', 560, 60, False): (20142,
        [4908.209405519467, 8435.237630973654, 11567.263575868055, 14985.099867766043],
        [59298.996191258935, 70998.06405193073, 55850.12419151026, 34592.13970278636]),
    ('HH', 314, 42, True): (20142,
        [1681.0743219497715, 1743.4936538654065, 1689.9746398943266, 1923.184767764329],
        [6918.844429675626, 6679.934031174166, 7035.26022241999, 6977.7431610578715]),
}


def fingerprint(design: str, prompt: int, token: int, strict: bool) -> tuple[int, list, list]:
    """The point's completed requests and its sums of TTFT and E2E over each quarter of the stream."""
    from splitwise_plan.inputs.workloads import load_workload
    from splitwise_plan.sim.cluster import SchedulerConfig
    from splitwise_plan.sim.simulator import Simulator

    scheduler = dataclasses.replace(SchedulerConfig(), mixed_pool=not strict)
    sim = Simulator(load_workload("coding").generate(1000, duration_s=20, seed=0), scheduler=scheduler, method="events")
    result, table = sim.run_requests(design, prompt, token)
    sums = [[float(np.nansum(q)) for q in np.array_split(np.asarray(table[c], dtype=np.float64), 4)]
            for c in ("ttft_s", "e2e_s")]
    return int(result.completed), *sums


@pytest.mark.parametrize("point", list(GOLDEN), ids=lambda p: f"{p[0]}-{p[1]}+{p[2]}{'-strict' if p[3] else ''}")
def test_large_pools_route_as_before(point):
    completed, ttft, e2e = fingerprint(*point)
    want = GOLDEN[point]
    assert completed == want[0]
    np.testing.assert_allclose(ttft, want[1], rtol=RTOL, atol=0.0)
    np.testing.assert_allclose(e2e, want[2], rtol=RTOL, atol=0.0)


if __name__ == "__main__":   # the figures of GOLDEN, from the code as it is
    for p in (("AA", 716, 60, False), ("A100", 1667, 0, False), ("HH", 330, 12, False), ("AA", 560, 60, False),
              ("HH", 314, 42, True)):
        print(f"    {p!r}: {fingerprint(*p)!r},")
