"""Workloads: shipped traces, generated Poisson streams, and exact trace replay."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from splitwise_plan import RequestStream, SplitwisePlanError, load_trace, load_workload, workload_names
from splitwise_plan.inputs.paths import data_file

SHA256 = {"coding.csv": "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
          "conversation.csv": "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8"}


@pytest.fixture(scope="module")
def coding():
    return load_workload("coding")


@pytest.fixture(scope="module")
def conversation():
    return load_workload("conversation")


def test_shipped_traces_are_the_azure_files():
    for name, digest in SHA256.items():
        assert hashlib.sha256(data_file("workloads", name).read_bytes()).hexdigest() == digest
    readme = data_file("workloads", "README.md").read_text(encoding="utf-8")
    assert "CC BY 4.0" in readme and "Splitwise" in readme and "Azure/AzurePublicDataset" in readme


def test_shipped_traces_match_shared_copies(azure_dir):
    assert data_file("workloads", "coding.csv").read_bytes() == (azure_dir / "AzureLLMInferenceTrace_code.csv").read_bytes()
    assert (data_file("workloads", "conversation.csv").read_bytes()
            == (azure_dir / "AzureLLMInferenceTrace_conv.csv").read_bytes())


def test_workload_sizes_match_trace_figures(coding, conversation):
    # Figures from the Azure trace README (numpy linear percentiles).
    assert workload_names() == ["coding", "conversation"]
    c, v = coding.summary(), conversation.summary()
    assert (c["requests"], v["requests"]) == (8819, 19366)
    assert (c["prompt_p50"], c["output_p50"], v["prompt_p50"], v["output_p50"]) == (1469, 13, 1020, 129)
    assert c["prompt_mean"] == pytest.approx(2047.9, abs=0.1)
    assert v["output_mean"] == pytest.approx(211.1, abs=0.1)
    assert load_workload("code").name == "coding"  # alias


@pytest.mark.parametrize("seed", [0, 1])
def test_generated_stream_rate_and_gaps(coding, seed):
    s = coding.generate(70, duration_s=600, seed=seed)
    # Tolerance 3%: the count of a 600 s Poisson stream at 70 req/s has sd sqrt(42000) ~ 0.5%.
    assert s.rate == pytest.approx(70, rel=0.03)
    assert s.duration_s == 600 and s.arrival_s[-1] < 600 and s.arrival_s[0] > 0
    assert np.all(np.diff(s.arrival_s) >= 0)
    gaps = np.diff(np.concatenate([[0.0], s.arrival_s]))
    assert gaps.mean() == pytest.approx(1 / 70, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)  # exponential: CV = 1
    assert s.arrival_s.dtype == np.float64 and s.prompt_tokens.dtype == np.int64
    assert s.output_tokens.dtype == np.int64


def test_a_burst_reads_as_its_busiest_ten_seconds_over_the_mean_and_chance_as_none():
    # 100 s at one request a second, and 50 more in 40-50 s: 60 in the busiest 10 s, 15 on average (4x)
    a = np.sort(np.concatenate([np.arange(100.0), 40.0 + np.arange(50) * 0.2]))
    one = np.ones(a.size, dtype=np.int64)
    assert RequestStream(a, one, one, horizon_s=100.0).burst() == pytest.approx(4.0)
    # evenly spaced, or Poisson at any rate: no burst (chance alone reaches 1.3x at 10 req/s over 2 minutes)
    assert RequestStream(np.arange(100.0), one[:100], one[:100], horizon_s=100.0).burst() == 1.0
    for rate in (0.5, 10.0, 200.0):
        assert load_workload("coding").generate(rate, duration_s=120.0, seed=1).burst() == 1.0
    # shorter than the window: nothing to compare
    assert RequestStream(a[:8], one[:8], one[:8]).burst() == 1.0


def test_generated_sizes_follow_the_trace(coding, conversation):
    # Medians of 42,000 draws: within 3% of the trace medians (1469 / 1020 prompt tokens)
    # and within 1 token of the small output medians (13 / 129 within 3%).
    c = coding.generate(70, duration_s=600, seed=0)
    v = conversation.generate(70, duration_s=600, seed=0)
    assert np.median(c.prompt_tokens) == pytest.approx(1469, rel=0.03)
    assert abs(np.median(c.output_tokens) - 13) <= 1
    assert np.median(v.prompt_tokens) == pytest.approx(1020, rel=0.03)
    assert np.median(v.output_tokens) == pytest.approx(129, rel=0.03)
    assert c.output_tokens.mean() == pytest.approx(27.9, rel=0.05)
    # Every drawn size comes from the trace.
    assert np.isin(c.prompt_tokens, coding.prompt_tokens).all()
    assert np.isin(v.output_tokens, conversation.output_tokens).all()


def test_generation_is_seeded_without_global_state(coding):
    np.random.seed(123)
    a = coding.generate(30, seed=7)
    np.random.seed(456)
    b = coding.generate(30, seed=7)
    c = coding.generate(30, seed=8)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert not np.array_equal(a.arrival_s[:10], c.arrival_s[:10])
    assert a.duration_s == 120.0  # the default duration


def test_paired_sampling_keeps_rows_together(coding):
    s = coding.generate(20, duration_s=60, seed=0, paired=True)
    pairs = set(zip(coding.prompt_tokens.tolist(), coding.output_tokens.tolist()))
    assert all(p in pairs for p in zip(s.prompt_tokens.tolist(), s.output_tokens.tolist()))


def test_replay_reference_format_exactly(sim_dir):
    path = sim_dir / "rr_code_70_2min.csv"
    s = load_trace(path)
    raw = pd.read_csv(path)
    assert len(s) == 8502 == len(raw)
    np.testing.assert_array_equal(s.arrival_s, raw["arrival_timestamp"].to_numpy())
    np.testing.assert_array_equal(s.prompt_tokens, raw["prompt_size"].to_numpy())
    np.testing.assert_array_equal(s.output_tokens, raw["token_size"].to_numpy())
    assert s.rate == pytest.approx(70.85, rel=0.001)  # the README's effective rate (8502 / ~120 s)
    t = load_trace(sim_dir / "test_trace.csv")
    assert t.arrival_s.tolist() == [0.0, 2.0, 3.0]   # the file's [1, 3, 4], less the idle second before the first
    assert t.prompt_tokens.tolist() == [4096, 2048, 2048]
    assert t.output_tokens.tolist() == [32, 8, 16]


@pytest.mark.parametrize("lead_in", [3600.0, 1.7e9])
def test_a_trace_cut_from_a_longer_log_replays_at_its_own_rate(write, lead_in):
    """Arrivals counted from a log's start (an hour in, or Unix time) replay as the same trace
    from 0, to the second: same rate and span, no idle lead-in to simulate."""
    rows = [(0.25, 100, 5), (0.75, 200, 3), (2.5, 50, 9), (4.25, 80, 2)]
    text = "arrival_timestamp,prompt_size,token_size\n" + "".join(f"{a + lead_in!r},{p},{o}\n" for a, p, o in rows)
    s = load_trace(write("late.csv", text))
    assert s.arrival_s.tolist() == [0.25, 0.75, 2.5, 4.25]
    assert s.rate == pytest.approx(4 / 4.25)


def test_trace_column_names_match_in_any_case(write):
    """A spreadsheet's ARRIVAL_TIMESTAMP or ' Prompt_Size ' is the reference format's column."""
    s = load_trace(write("up.csv", "ARRIVAL_TIMESTAMP, Prompt_Size ,Token_Size\n0.5,100,5\n1.5,200,3\n"))
    assert s.arrival_s.tolist() == [0.5, 1.5] and s.prompt_tokens.tolist() == [100, 200]
    a = load_trace(write("az.csv", "timestamp,contexttokens,generatedtokens\n0,10,2\n2.5,20,4\n"))
    assert a.arrival_s.tolist() == [0.0, 2.5] and a.output_tokens.tolist() == [2, 4]


def test_replay_azure_format_exactly(coding):
    s = load_trace("coding")
    assert len(s) == 8819 and s.arrival_s[0] == 0.0
    assert s.duration_s == pytest.approx(3435.948056, abs=1e-6)  # 19:14:19.9280160 - 18:17:03.9799600
    assert s.rate == pytest.approx(2.567, abs=0.001)
    np.testing.assert_array_equal(s.output_tokens, coding.output_tokens)
    assert s.prompt_tokens[:3].tolist() == [4808, 3180, 110]
    assert s.output_tokens[:3].tolist() == [10, 8, 27]
    assert s.arrival_s[1] == pytest.approx(4.0319600 - 3.9799600, abs=1e-9)


def test_replay_azure_text_and_numeric_timestamps(write):
    p = write("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                       "2023-11-16 23:59:59.5000000,100,1\r\n2023-11-17 00:00:01.2500001,200,7")
    s = load_trace(p)
    assert s.arrival_s.tolist() == [0.0, pytest.approx(1.7500001, abs=1e-9)]
    assert s.output_tokens.tolist() == [1, 7] and s.name == "a"
    q = write("b.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n10.5,5,2\n12,6,3\n")
    assert load_trace(q).arrival_s.tolist() == [0.0, 1.5]


def test_stream_csv_round_trip(coding, tmp_path):
    s = coding.generate(10, duration_s=30, seed=2)
    s.to_csv(tmp_path / "t.csv")
    r = load_trace(tmp_path / "t.csv")
    assert np.array_equal(r.arrival_s, s.arrival_s)
    assert np.array_equal(r.prompt_tokens, s.prompt_tokens) and np.array_equal(r.output_tokens, s.output_tokens)


@pytest.mark.parametrize("text,needle", [
    ("", "is empty"),
    ("a,b,c\n1,2,3\n", "expected the Azure format (TIMESTAMP, ContextTokens, GeneratedTokens)"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no data rows"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,5,0\n", "line 2, column GeneratedTokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,5.5,2\n", "line 2, column ContextTokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,5,2\nyesterday,5,2\n",
     "line 3, column TIMESTAMP: 'yesterday' is not a time"),
    ("arrival_timestamp,prompt_size,token_size\n1,5,2\n-1,5,2\n", "line 3, column arrival_timestamp: negative"),
    ("arrival_timestamp,prompt_size,token_size\nx,5,2\n", "line 2, column arrival_timestamp"),
    ("arrival_timestamp,prompt_size,token_size\n1,5,\n", "line 2, column token_size: an empty or NaN value"),
    ("arrival_timestamp,prompt_size,token_size,prompt_size\n1,5,2,9\n", "column prompt_size appears more than once"),
    # a row longer than the header: not its first field taken as an index (the sizes read one column off)
    ("arrival_timestamp,prompt_size,token_size\n0,100,10,5\n", "line 2: more fields than the header's columns"),
])
def test_bad_trace_files(write, text, needle):
    with pytest.raises(SplitwisePlanError) as err:
        load_trace(write("t.csv", text))
    assert needle in str(err.value) and "t.csv" in str(err.value)


def test_unknown_workload_and_missing_file(tmp_path):
    with pytest.raises(SplitwisePlanError, match="unknown workload 'chat'; valid: coding, conversation"):
        load_workload("chat")
    with pytest.raises(SplitwisePlanError, match="trace file not found"):
        load_trace(tmp_path / "none.csv")
    with pytest.raises(SplitwisePlanError, match="workload file not found"):
        load_workload(tmp_path / "none.csv")


@pytest.mark.parametrize("rate,duration,needle", [
    (0, 120, "rate"), (-5, 120, "rate"), (float("nan"), 120, "rate"), (float("inf"), 120, "rate"),
    ("x", 120, "rate"), (70, 0, "duration"), (70, -1, "duration"),
])
def test_non_positive_rate_or_duration(coding, rate, duration, needle):
    with pytest.raises(SplitwisePlanError, match=needle):
        coding.generate(rate, duration_s=duration)


def test_request_stream_validates():
    with pytest.raises(SplitwisePlanError, match="sorted"):
        RequestStream(np.array([2.0, 1.0]), np.array([1, 1]), np.array([1, 1]))
    with pytest.raises(SplitwisePlanError, match="between 1 and"):
        RequestStream(np.array([1.0]), np.array([5]), np.array([0]))
    with pytest.raises(SplitwisePlanError, match="between 1 and 1,000,000"):
        RequestStream(np.array([1.0]), np.array([1_000_001]), np.array([5]))
    s = RequestStream(np.array([0.5, 2.0]), np.array([3, 4]), np.array([1, 2]), name="x")
    assert len(s) == 2 and s.duration_s == 2.0 and s.rate == 1.0
    with pytest.raises(ValueError):
        s.arrival_s[0] = 9.0  # read-only arrays


REF = "arrival_timestamp,prompt_size,token_size\n0.5,100,5\n1.5,200,3\n"


@pytest.mark.parametrize("name", ["t.csv.gz", "t.csv.bz2", "t.csv.xz", "t.csv.zip", "t.csv.zst", "t.csv.tar",
                                  "t.tar.gz", "T.CSV.XZ"])
def test_a_file_not_compressed_as_its_name_says_is_a_user_error(write, name):
    """pandas would pick a decompressor from the name and fail inside it (BadZipFile, LZMAError, a
    missing zstandard): one error naming the file, for a trace, a workload and a profile alike."""
    path = write(name, REF)
    for load in (load_trace, load_workload):
        with pytest.raises(SplitwisePlanError) as err:
            load(path)
        assert str(path) in str(err.value) and "\n" not in str(err.value)
    from splitwise_plan import load_profiles
    with pytest.raises(SplitwisePlanError, match=f"profile file .*{name}"):
        load_profiles(path)


def test_compressed_traces_replay_as_the_plain_one(tmp_path):
    import bz2
    import gzip
    import lzma
    import tarfile
    import zipfile
    data = REF.encode()
    (tmp_path / "t.csv").write_bytes(data)
    (tmp_path / "t.csv.gz").write_bytes(gzip.compress(data))
    (tmp_path / "t.csv.bz2").write_bytes(bz2.compress(data))
    (tmp_path / "t.csv.xz").write_bytes(lzma.compress(data))
    with zipfile.ZipFile(tmp_path / "t.csv.zip", "w") as z:
        z.writestr("t.csv", data)
    with tarfile.open(tmp_path / "t.tar.gz", "w:gz") as t:
        t.add(tmp_path / "t.csv", arcname="t.csv")
    for name in ("t.csv.gz", "t.csv.bz2", "t.csv.xz", "t.csv.zip", "t.tar.gz"):
        s = load_trace(tmp_path / name)
        assert s.arrival_s.tolist() == [0.5, 1.5] and s.prompt_tokens.tolist() == [100, 200], name
    with zipfile.ZipFile(tmp_path / "two.zip", "w") as z:
        z.writestr("a.csv", data)
        z.writestr("b.csv", data)
    with pytest.raises(SplitwisePlanError, match="two.zip is a zip archive of 2 files; it must hold one CSV"):
        load_trace(tmp_path / "two.zip")
    (tmp_path / "cut.csv.gz").write_bytes(gzip.compress(data)[:20])   # truncated
    with pytest.raises(SplitwisePlanError, match="cut.csv.gz cannot be read as gzip"):
        load_trace(tmp_path / "cut.csv.gz")


@pytest.mark.parametrize("text,line,col", [
    ("arrival_timestamp,prompt_size,token_size\n0,100,10\n1e12,100,10\n3e18,100,10\n", 4, "arrival_timestamp"),
    ("arrival_timestamp,prompt_size,token_size\n1e308,100,10\n0,100,10\n", 2, "arrival_timestamp"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n5,100,10\n2e12,100,10\n", 3, "TIMESTAMP"),
])
def test_arrivals_spanning_more_than_1e12_s_are_refused(write, text, line, col):
    """Nanoseconds read as seconds would overflow the simulators' int64 time steps: a user error with a hint."""
    with pytest.raises(SplitwisePlanError) as err:
        load_trace(write("far.csv", text))
    msg = str(err.value)
    assert f"far.csv, line {line}, column {col}:" in msg and "1e+12 s" in msg and "another unit than seconds" in msg


def test_arrivals_spanning_1e12_s_replay(write):
    s = load_trace(write("far.csv", "arrival_timestamp,prompt_size,token_size\n0,100,10\n1e12,100,10\n"))
    assert s.arrival_s.tolist() == [0.0, 1e12]


@pytest.mark.parametrize("text,needle", [
    ("arrival_timestamp,prompt_size,token_size\n0,100,True\n1,100,True\n",
     "line 2, column token_size: 'True' is not a positive integer"),
    ("arrival_timestamp,prompt_size,token_size\n0,False,5\n1,false,5\n",
     "line 2, column prompt_size: 'False' is not a positive integer"),
    ("arrival_timestamp,prompt_size,token_size\n0,100,5\n1,100,True\n2,100,\n",
     "line 3, column token_size: 'True' is not a positive integer"),
    ("arrival_timestamp,prompt_size,token_size\nTrue,100,5\nTrue,100,5\n",
     "line 2, column arrival_timestamp: 'True' is not a finite number"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nTrue,100,5\nTrue,100,5\n",
     "line 2, column TIMESTAMP: 'True' is not a time"),
])
def test_boolean_cells_are_not_the_numbers_1_and_0(write, text, needle):
    """A column that is all True is read as bools by pandas: refused as a mixed one is, not taken as 1."""
    with pytest.raises(SplitwisePlanError) as err:
        load_trace(write("b.csv", text))
    assert needle in str(err.value) and "b.csv" in str(err.value)


@pytest.mark.parametrize("text,needle", [
    ("# my trace\n" + REF, "line 1 is a comment ('# my trace'): comment lines are not supported"),
    (REF + "# end\n", "line 4 is a comment ('# end')"),
    (REF.replace("\n0.5", "\n  # skip\n0.5"), "line 2 is a comment ('# skip')"),
    (REF.replace("\n", "\r"), None),   # lines ended by CR alone: no comment, replays
    ("# x\r" + REF.replace("\n", "\r"), "line 1 is a comment"),
])
def test_comment_lines_are_named_as_such(write, text, needle):
    path = write("c.csv", text)
    if needle is None:
        assert len(load_trace(path)) == 2
        return
    with pytest.raises(SplitwisePlanError) as err:
        load_trace(path)
    assert needle in str(err.value) and "c.csv" in str(err.value)


def test_control_bytes_are_not_echoed_raw(tmp_path):
    (tmp_path / "nul.csv").write_bytes(b"\0" * 100)
    (tmp_path / "bin.csv").write_bytes(b"arrival_timestamp,prompt_size,token_size\n0,1\x1b[2J,5\n")
    for name, shown in (("nul.csv", "line 1 holds the control character '\\x00'"),
                        ("bin.csv", "line 2 holds the control character '\\x1b'")):
        with pytest.raises(SplitwisePlanError) as err:
            load_trace(tmp_path / name)
        msg = str(err.value)
        assert f"{name} is not a text CSV: {shown}" in msg
        assert not any(ord(ch) < 32 for ch in msg)


@pytest.mark.parametrize("header,needle", [
    ("arrival_timestamp,prompt_size,token_size,PROMPT_SIZE", "columns prompt_size and PROMPT_SIZE are one column"),
    ("arrival_timestamp,prompt_size,token_size,TIMESTAMP,ContextTokens,GeneratedTokens",
     "has both the Azure columns (TIMESTAMP, ContextTokens, GeneratedTokens) and the reference ones"),
])
def test_ambiguous_columns_are_refused(write, header, needle):
    n = header.count(",") + 1
    path = write("amb.csv", header + "\n" + ",".join(["1"] * n) + "\n" + ",".join(["2"] * n) + "\n")
    with pytest.raises(SplitwisePlanError) as err:
        load_trace(path)
    assert needle in str(err.value) and "amb.csv" in str(err.value) and "ambiguous" in str(err.value)


def test_standard_input_is_not_a_trace(capsys):
    from splitwise_plan.cli import main
    for load in (load_trace, load_workload):
        with pytest.raises(SplitwisePlanError, match="'-' would be standard input, which is not supported"):
            load("-")
    code = main(["simulate", "--design", "HH", "-p", "10", "-t", "3", "-q", "--trace", "-"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: the trace '-' would be standard input") and err.count("\n") == 1


def test_a_stream_drawn_in_pieces_is_the_one_drawn_at_once(monkeypatch):
    """Arrivals are drawn a piece at a time (a stop signal is handled between two): the same stream, to the bit."""
    from splitwise_plan.inputs import workloads
    wl = workloads.load_workload("coding")
    monkeypatch.setattr(workloads, "DRAW_PIECE", 1000)
    pieces = wl.generate(50, duration_s=300, seed=4)
    monkeypatch.setattr(workloads, "DRAW_PIECE", 1 << 40)
    once = wl.generate(50, duration_s=300, seed=4)
    assert len(pieces) > 10_000
    assert (pieces.arrival_s == once.arrival_s).all() and (pieces.prompt_tokens == once.prompt_tokens).all()


def test_a_stream_beyond_memory_is_refused_naming_rate_and_duration(monkeypatch):
    from splitwise_plan.inputs import workloads
    monkeypatch.setattr(workloads, "available_memory", lambda: 64 << 20)   # 64 MiB free
    with pytest.raises(SplitwisePlanError, match=r"rps x duration = 1000 x 1000 s = 1,000,000 requests is more than"):
        workloads.load_workload("coding").generate(1000, duration_s=1000)


def test_a_large_trace_is_read_in_chunks_with_progress(tmp_path, monkeypatch):
    from splitwise_plan.inputs import tables
    monkeypatch.setattr(tables, "CHUNK_ROWS", 100)
    p = tmp_path / "t.csv"
    stream = load_workload("coding").generate(20, duration_s=50, seed=1)
    stream.to_csv(p)
    seen = []
    back = load_trace(p, on_progress=lambda done, total: seen.append((done, total)))
    assert len(back) == len(stream) and (back.prompt_tokens == stream.prompt_tokens).all()
    assert len(seen) >= len(stream) // 100 and seen[-1][0] == seen[-1][1] == p.stat().st_size
