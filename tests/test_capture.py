"""Capture and replay (docs/capture.md): views and dtypes survive, the model's outputs do not
change, the bounds hold, a wrong kernel is flagged under its clause naming layer and call, and
bad input is one line naming the file without losing the other calls."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from conformance.results import Outcome
from opconform import cli
from opconform.capture import Capture, CaptureError, read_call, read_index
from opconform.capture.judge import replay


class Norm(torch.nn.Module):
    """LLaMA's RMSNorm (x * rsqrt(mean(x^2) + eps) * weight, float32 inside)."""

    def __init__(self, width=16, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(width))
        self.eps = eps

    def forward(self, x):
        v = x.float()
        return (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)


def _norm_mapping(module, args, kwargs):
    return {"x": args[0], "weight": module.weight, "eps": module.eps}


def _capture(folder, calls=3, **limits):
    norm = Norm()
    with Capture(folder, **limits) as cap:
        cap.attach(norm, "rms_norm", _norm_mapping, name="model.norm")
        gelu = cap.wrap(lambda x: F.gelu(x, approximate="tanh"), "new_gelu", lambda x: {"x": x}, name="act")
        for _ in range(calls):
            x = torch.randn(6, 32)
            norm(x[:, ::2])  # a strided view
            gelu(x.t())
    return norm


def test_views_and_dtypes_come_back_as_recorded(tmp_path):
    base = torch.arange(40, dtype=torch.float32).reshape(5, 8)
    view = base[1:, 2::3].t()  # storage offset 10, strides (3, 8)
    half = torch.randn(3, 4).to(torch.bfloat16)
    with Capture(tmp_path) as cap:
        f = cap.wrap(
            lambda x, w: x * 1.0, "rms_norm", lambda x, w: {"x": x, "weight": w, "eps": 1e-6}, name="f"
        )
        f(view, half)
    _, entries = read_index(tmp_path)
    inputs, outputs = read_call(tmp_path, entries[0])
    assert inputs["x"].stride() == view.stride() and torch.equal(inputs["x"], view)
    assert entries[0].inputs["x"]["storage_offset"] == view.storage_offset() == 10
    assert inputs["weight"].dtype == torch.bfloat16 and torch.equal(inputs["weight"], half)
    assert entries[0].options == {"eps": 1e-6} and outputs[0].stride() == (view * 1.0).stride()


def test_capture_never_changes_outputs_and_records_inputs_before_an_in_place_kernel(tmp_path):
    torch.manual_seed(0)
    norm, x = Norm(), torch.randn(4, 16)
    plain = norm(x)

    def in_place(x, residual):  # vLLM's fused_add_rms_norm convention: results written into the inputs
        residual.add_(x)
        x.copy_(norm(residual))
        return x, residual

    with Capture(tmp_path) as cap:
        cap.attach(norm, "rms_norm", _norm_mapping, name="n")
        fused = cap.wrap(
            in_place, "fused_add_rms_norm",
            lambda x, r: {"x": x, "residual": r, "weight": norm.weight, "eps": norm.eps}, name="fused",
        )  # fmt: skip
        assert torch.equal(norm(x), plain)
        a, r = torch.randn(4, 16), torch.randn(4, 16)
        before = (a.clone(), r.clone())
        fused(a, r)
    _, entries = read_index(tmp_path)
    inputs, _ = read_call(tmp_path, entries[-1])
    assert torch.equal(inputs["x"], before[0]) and torch.equal(inputs["residual"], before[1])
    document, problems = replay(tmp_path)
    assert problems == [] and [c.outcome for c in document.results if c.op == "fused_add_rms_norm"] == [
        Outcome.PASSED
    ]


def test_bounds_calls_per_op_sampling_and_byte_budget(tmp_path):
    _capture(tmp_path / "limit", calls=5, max_calls_per_op=2)
    index, entries = read_index(tmp_path / "limit")
    assert len(entries) == 4 and index["dropped"]["per_op_limit"] == 6
    _capture(tmp_path / "none", calls=4, sample_rate=0.0)
    assert read_index(tmp_path / "none")[1] == []
    _capture(tmp_path / "half", calls=20, sample_rate=0.5)
    assert 5 <= len(read_index(tmp_path / "half")[1]) <= 35
    budget = 2000  # one norm call is 16*6*4*2 + 16*4 bytes = 832; a gelu call 6*32*4*2 = 1536
    _capture(tmp_path / "budget", calls=5, byte_budget=budget, shard_bytes=1)
    index, entries = read_index(tmp_path / "budget")
    stored = sum(e.nbytes for e in entries)
    assert 0 < stored <= budget and index["bytes"] == stored and index["dropped"]["byte_budget"] > 0
    assert len(list((tmp_path / "budget").glob("*.safetensors"))) == len(entries)


@pytest.mark.parametrize(
    "kwargs, word",
    [({"max_calls_per_op": -1}, "max_calls_per_op"), ({"sample_rate": 2}, "sample_rate"),
     ({"byte_budget": 1.5}, "byte_budget"), ({"source": ""}, "source"), ({"shard_bytes": 0}, "shard_bytes")],
)  # fmt: skip
def test_bad_capture_arguments_name_the_argument(tmp_path, kwargs, word):
    with pytest.raises(ValueError, match=word):
        Capture(tmp_path, **kwargs)
    with pytest.raises(ValueError, match="op: unknown op 'nosuch'"):
        Capture(tmp_path).attach(Norm(), "nosuch", _norm_mapping)


def test_replay_flags_the_wrong_kernel_naming_layer_and_call(tmp_path):
    with Capture(tmp_path, source="mydevice") as cap:
        right = cap.wrap(
            lambda x: F.gelu(x, approximate="tanh"), "new_gelu", lambda x: {"x": x}, name="layers.0.act"
        )
        wrong = cap.wrap(F.gelu, "new_gelu", lambda x: {"x": x}, name="layers.1.act")  # erf GELU for tanh
        for _ in range(2):
            x = torch.randn(4, 64) * 3
            right(x), wrong(x)
    document, problems = replay(tmp_path)
    failed = [c for c in document.results if c.outcome == Outcome.FAILED]
    assert [c.nodeid for c in failed] == [f"replay::layers.1.act::call{i}::new_gelu" for i in range(2)]
    assert all(
        c.failure.clause == "ACT-GELU-VARIANTS" and "layer layers.1.act call" in c.message for c in failed
    )
    assert {c.backend for c in document.results} == {"mydevice"} and problems == []


def _main(argv):
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def test_bad_folders_and_files_are_one_line_and_lose_no_other_call(tmp_path, capsys):
    _capture(tmp_path, calls=3, shard_bytes=1)  # one file per call
    index_path = tmp_path / "index.json"
    index = json.loads(index_path.read_text())
    files = [c["file"] for c in index["calls"]]
    truncated = tmp_path / files[0]
    truncated.write_bytes(truncated.read_bytes()[:40])
    (tmp_path / files[1]).unlink()  # an index entry whose file is missing
    index["calls"][2]["inputs"]["x"]["dtype"] = "float16"  # a wrong dtype in the index
    index["calls"][3] = {"op": "rms_norm"}  # a malformed entry
    index_path.write_text(json.dumps(index))
    assert _main(["replay", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    problems = [line for line in captured.err.splitlines() if line]
    assert len(problems) == 4 and "Traceback" not in captured.err
    for problem, name in zip(problems[:3], files[:3], strict=True):
        assert name in problem, problem
    assert "calls[3]" in problems[3]
    document, _ = replay(tmp_path)
    assert sum(c.outcome == Outcome.PASSED for c in document.results) == len(files) - 4

    index["suite_version"] = "0.0.1"
    index_path.write_text(json.dumps(index))
    assert _main(["replay", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "index.json: written by opconform '0.0.1'" in err[0]
    with pytest.raises(CaptureError, match="no capture index"):
        read_index(tmp_path / "nowhere")


def test_replay_reruns_a_backend_and_writes_a_report_merge_reads(tmp_path, capsys):
    _capture(tmp_path / "cap", calls=1)
    assert (
        _main(["replay", str(tmp_path / "cap"), "--backend", "native", "--out", str(tmp_path / "rep")]) == 0
    )
    assert _main(["merge", str(tmp_path / "rep" / "report.json")]) == 0
    assert "native@cpu" in capsys.readouterr().out
    assert _main(["replay", str(tmp_path / "cap"), "--backend", "nosuch"]) == 2
    assert "--backend nosuch" in capsys.readouterr().err


def test_staging_buffers_keep_every_call_across_flushes_nesting_and_oversize_tensors(tmp_path):
    """Tiny buffers (shard_bytes=1200: two of 600 bytes) force every path of staging: a call whose
    output does not fit after its inputs (the inputs move out of the buffer handed to the writer),
    a call recorded inside another, tensors bigger than a buffer, a call dropped by the budget."""
    torch.manual_seed(0)
    with Capture(tmp_path, shard_bytes=1200, byte_budget=3500) as cap:
        inner = cap.wrap(lambda x: x * 2, "new_gelu", lambda x: {"x": x}, name="inner")

        def outer_function(x):
            return inner(x) + 1

        outer = cap.wrap(outer_function, "quick_gelu", lambda x: {"x": x}, name="outer")
        given = [torch.randn(n, 8) for n in (3, 9, 2, 20, 5, 4, 3)]  # x: 32n - 4 bytes; n = 20 > 600
        for x in given:
            outer(x[:, ::2])
    index, entries = read_index(tmp_path)
    assert len(list(tmp_path.glob("*.safetensors"))) > 2 and index["bytes"] <= 3500
    assert index["dropped"]["byte_budget"] > 0
    seen = {"inner": [], "outer": []}
    for entry in entries:
        inputs, outputs = read_call(tmp_path, entry)
        seen[entry.layer].append(entry.call)
        x = given[entry.call][:, ::2]
        assert torch.equal(inputs["x"], x) and inputs["x"].stride() == x.stride()
        want = x * 2 if entry.layer == "inner" else x * 2 + 1
        assert torch.equal(outputs[0], want), (entry.layer, entry.call)
    assert seen["inner"] and seen["outer"] and index["bytes"] == sum(e.nbytes for e in entries)


def _bits(dtype, n):
    """``n`` elements of ``dtype`` with random bits (NaNs and subnormals among them)."""
    bits = torch.randint(0, 256, (n * dtype.itemsize,), dtype=torch.uint8)
    return (bits % 2 if dtype == torch.bool else bits).view(dtype)


def _same(a, b) -> bool:
    flat = [t.contiguous().reshape(-1).view(torch.uint8) for t in (a, b)]
    return a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride() and torch.equal(*flat)


def test_shards_written_by_hand_are_valid_safetensors_and_every_dtype_comes_back_bit_for_bit(tmp_path):
    """The staged shards are written without safetensors' save_file (store.write_flat): safe_open
    validates every file, which holds exactly the index's keys and the tensor bytes (no padding),
    and every dtype comes back bit for bit: empty, odd-sized, strided and oversize (loose) tensors,
    and a dtype outside write_flat's table (uint16, through save_file)."""
    from safetensors import safe_open

    torch.manual_seed(0)
    dtypes = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64,
              torch.bool, torch.uint8, torch.int8, torch.int16, torch.complex64, torch.uint16]  # fmt: skip
    sizes = (0, 1, 3, 50, 300)
    given = [(_bits(d, n), _bits(d, 4 * n).reshape(n, 4)[:, 1::2]) for d in dtypes for n in sizes]
    with Capture(tmp_path, shard_bytes=2048) as cap:  # buffers of 1024 bytes: 300 float64 are loose
        f = cap.wrap(
            lambda a, b: a.clone(), "rms_norm", lambda a, b: {"x": a, "weight": b, "eps": 1e-6}, name="f"
        )
        for a, b in given:
            f(a, b)
    index, entries = read_index(tmp_path)
    assert len(entries) == len(given) and index["bytes"] == sum(e.nbytes for e in entries)
    for entry in entries:
        inputs, outputs = read_call(tmp_path, entry)
        a, b = given[entry.call]
        assert _same(inputs["x"], a) and _same(inputs["weight"], b) and _same(outputs[0], a), entry.call
    for shard in sorted({e.file for e in entries}):
        mine = [e for e in entries if e.file == shard]
        names = {m["key"] for e in mine for m in (*e.inputs.values(), *e.outputs)}
        with safe_open(str(tmp_path / shard), framework="pt") as opened:
            assert set(opened.keys()) == names
        raw = (tmp_path / shard).read_bytes()
        assert len(raw) == 8 + int.from_bytes(raw[:8], "little") + sum(e.nbytes for e in mine)


def test_a_recorded_call_is_one_record_the_garbage_collector_does_not_track(tmp_path):
    """staging's design: one flat tuple per call of numbers and strings (the options as JSON text),
    so a long capture does not make every collection scan a dozen objects per call."""
    import gc

    norm = Norm()
    with Capture(tmp_path) as cap:
        cap.attach(norm, "rms_norm", _norm_mapping, name="model.norm")
        norm(torch.randn(6, 16))
        gc.collect()
        assert cap._records and not any(gc.is_tracked(record) for record in cap._records)
    _, entries = read_index(tmp_path)
    assert entries[0].options == {"eps": 1e-6}


def test_lazy_conjugate_and_negative_views_are_recorded_as_their_values(tmp_path):
    """A contiguous tensor's bytes are copied as they lie (staging's memmove) only where they are
    its values: a lazy conjugate or negation (``conj()``, ``_neg_view()``) is recorded resolved."""
    z = torch.randn(4, 3, dtype=torch.complex64)
    views = {"conj": z.conj(), "neg": torch.randn(4, 3)._neg_view()}
    views["parameter"] = torch.nn.Parameter(torch.randn(4, 3))
    with Capture(tmp_path) as cap:
        f = cap.wrap(lambda x: x.clone(), "new_gelu", lambda x: {"x": x}, name="f")
        for view in views.values():
            f(view)
    _, entries = read_index(tmp_path)
    for entry, (name, view) in zip(entries, views.items(), strict=True):
        inputs, outputs = read_call(tmp_path, entry)
        want = view.resolve_conj().resolve_neg().detach()
        assert torch.equal(inputs["x"], want) and torch.equal(outputs[0], want), name


def test_a_buffer_holding_the_whole_budget_is_prefaulted_alone_and_the_capture_still_overflows(tmp_path):
    """shard_bytes >= 2 * byte_budget: one buffer holds every call, so prefault touches only it;
    calls past the budget (staged, then dropped) still find the second buffer, made on use."""
    torch.manual_seed(0)
    given = [torch.randn(4, 16) for _ in range(6)]  # a call is 2 * 256 bytes; the budget holds 3
    with Capture(tmp_path, byte_budget=1536, shard_bytes=4096, prefault=True) as cap:
        assert cap._staging.buffers[1] is None and cap._staging.capacity == 1536
        f = cap.wrap(lambda x: x * 3, "new_gelu", lambda x: {"x": x}, name="f")
        for x in given:
            f(x)
    index, entries = read_index(tmp_path)
    assert [e.call for e in entries] == [0, 1, 2] and index["dropped"]["byte_budget"] == 3
    for entry in entries:
        inputs, outputs = read_call(tmp_path, entry)
        assert torch.equal(inputs["x"], given[entry.call]) and torch.equal(outputs[0], given[entry.call] * 3)


def test_a_buffer_holding_the_whole_budget_writes_nothing_before_close(tmp_path):
    """shard_bytes >= 2 * byte_budget (docs/capture.md, Which staging to choose): the writes wait
    for close(), so no writer runs beside the forward; close() writes the one shard."""
    given = [torch.full((4, 16), float(i)) for i in range(3)]  # 3 calls of 2 * 256 bytes: the budget
    cap = Capture(tmp_path, byte_budget=1536, shard_bytes=4096, prefault=True)
    f = cap.wrap(lambda x: x + 1, "new_gelu", lambda x: {"x": x}, name="f")
    for x in given:
        f(x)
    assert list(tmp_path.glob("*.safetensors")) == [] and cap._staging.writes == []
    cap.close()
    index, entries = read_index(tmp_path)
    assert [p.name for p in tmp_path.glob("*.safetensors")] == ["shard_000000.safetensors"]
    assert [e.call for e in entries] == [0, 1, 2] and index["bytes"] == 1536
