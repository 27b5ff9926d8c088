"""Both simulators on large pools (1,000 req/s of coding for 20 s, hundreds to 1,667 machines) give the
requests the times they gave before their routing kept each pool's machines in tournaments (issue 51): the
same machine picked, the first of a pool on a tie. Each point keeps its completed requests and the sums of
TTFT and E2E over each quarter of the stream, made with the scan of every machine before that change."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

RTOL = 1e-9

#: method -> (design, prompt machines, token machines, strict pools): completed, TTFT sums, E2E sums (quarters)
GOLDEN = {
    "fluid": {
        ("AA", 716, 60, False): (20142,
            [3533.9473374082963, 3500.1100702488884, 3474.855271635223, 3655.3933695412684],
            [10503.822342911899, 10090.535789412557, 10742.782220459496, 10415.766355776293]),
        ("A100", 1667, 0, False): (20142,
            [3534.731487549123, 3520.882951087334, 3531.5299989713562, 3550.274725851853],
            [10722.953720469543, 10741.37252365706, 11443.372024248514, 10598.917312645379]),
        ("HH", 330, 12, False): (20142,
            [1745.1763758046839, 2200.355530420319, 2487.1564235825817, 2770.8646436181552],
            [8093.4158960047225, 9163.984823961348, 10588.163023645451, 9078.850656271346]),
        ("AA", 560, 60, False): (20142,
            [4901.932008427783, 8466.912719482392, 11539.35441732762, 14874.068598275833],
            [59244.03322172344, 69700.3074160302, 55740.49684729763, 34599.449304661706]),
        ("HH", 314, 42, True): (20142,
            [1681.0743219497715, 1743.4936538654065, 1689.9746398943266, 1923.184767764329],
            [6918.527984118432, 6678.643718565727, 7034.716838295883, 6975.8773928084975]),
    },
    "events": {
        ("AA", 716, 60, False): (20142,
            [3534.0531344529422, 3494.3518306958395, 3490.0778470512496, 3638.1964659808145],
            [10522.692894407084, 10137.052811485328, 10791.759191917245, 10503.647644309756]),
        ("A100", 1667, 0, False): (20142,
            [3534.731487549123, 3520.8551802564007, 3531.157456698229, 3552.212989258005],
            [10718.596466440733, 10738.86065813415, 11457.79246781106, 10590.065268988259]),
        ("HH", 330, 12, False): (20142,
            [1692.5264365323799, 1865.5466040889567, 1936.2569298419878, 2148.1656522502126],
            [8802.574602445475, 10044.87332074102, 10504.168610293644, 9391.3903893979]),
        ("AA", 560, 60, False): (20142,
            [4908.209405519467, 8435.237630973654, 11567.263575868055, 14985.099867766043],
            [59298.996191258935, 70998.06405193073, 55850.12419151026, 34592.13970278636]),
        ("HH", 314, 42, True): (20142,
            [1681.0743219497715, 1743.4936538654065, 1689.9746398943266, 1923.184767764329],
            [6918.844429675626, 6679.934031174166, 7035.26022241999, 6977.7431610578715]),
    },
}
POINTS = list(GOLDEN["fluid"])


def fingerprint(method: str, design: str, prompt: int, token: int, strict: bool) -> tuple[int, list, list]:
    """The point's completed requests and its sums of TTFT and E2E over each quarter of the stream."""
    from splitwise_plan.inputs.workloads import load_workload
    from splitwise_plan.sim.cluster import SchedulerConfig
    from splitwise_plan.sim.simulator import Simulator
    scheduler = dataclasses.replace(SchedulerConfig(), mixed_pool=not strict)
    sim = Simulator(load_workload("coding").generate(1000, duration_s=20, seed=0), scheduler=scheduler, method=method)
    result, table = sim.run_requests(design, prompt, token)
    sums = [[float(np.nansum(q)) for q in np.array_split(np.asarray(table[c], dtype=np.float64), 4)]
            for c in ("ttft_s", "e2e_s")]
    return int(result.completed), *sums


@pytest.mark.parametrize("method", list(GOLDEN))
@pytest.mark.parametrize("point", POINTS, ids=lambda p: f"{p[0]}-{p[1]}+{p[2]}{'-strict' if p[3] else ''}")
def test_large_pools_route_as_before(method, point):
    completed, ttft, e2e = fingerprint(method, *point)
    want = GOLDEN[method][point]
    assert completed == want[0]
    np.testing.assert_allclose(ttft, want[1], rtol=RTOL, atol=0.0)
    np.testing.assert_allclose(e2e, want[2], rtol=RTOL, atol=0.0)


if __name__ == "__main__":   # the figures of GOLDEN, from the code as it is
    for m in GOLDEN:
        print(f"    {m!r}:")
        for p in POINTS:
            print(f"        {p!r}: {fingerprint(m, *p)!r},")
