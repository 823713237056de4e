"""``mesh`` given what a new user types by mistake: one line, the right exit code, no traceback.

Real processes against the real gateway; stdin is a pipe, as in a script or CI job.
"""

from __future__ import annotations

import asyncio
import json

from tests.meshd.support import mesh_env, run_mesh

EXIT_USAGE = 2


async def test_bad_inputs_end_in_one_line_never_a_traceback(world, gateway, uniq, tmp_path):
    _, b = await world.pair(uniq)
    env = mesh_env(gateway, b.api_key, tmp_path)
    bare = mesh_env("", None, tmp_path)
    del bare["MESH_URL"]
    host = gateway.split("://", 1)[1]
    not_dir = tmp_path / "a-folder"
    not_dir.mkdir()
    cases: list[tuple[tuple[str, ...], dict[str, str], bytes | None]] = [
        (("--url", "gateway.example.com:8080", "whoami"), env, None),
        (("--url", "ftp://gateway.example.com", "whoami"), env, None),
        (("--url", "http://[::1", "whoami"), env, None),
        (("--url", "http://127.0.0.1:notaport", "whoami"), env, None),
        (("--url", "http://", "whoami"), env, None),
        (("--url", "http://127.0.0.1:1/?x=1", "whoami"), env, None),
        (("login",), bare, b""),
        (("login", "--url", gateway), bare, b""),
        (("login", "--url", host), bare, None),
        (("login", "--url", gateway, "--api-key-stdin"), bare, b"\n"),
        (("login", "--url", gateway, "--api-key", "mk_x", "--api-key-stdin"), bare, b"mk_y\n"),
        (("whoami",), bare, None),
        (("--config", str(not_dir), "whoami"), bare, None),
        (("--url", gateway, "--api-key", "not-a-key", "whoami"), bare, None),
        (("inbox", "--wait", "soon"), env, None),
        (("ack", "last"), env, None),
        (("send", b.agent_id, "x", "--data", "[1]"), env, None),
        (("status", "t-nope", "finished"), env, None),
    ]
    results = await asyncio.gather(*(run_mesh(*argv, env=e, stdin=i) for argv, e, i in cases))
    tracebacks = [
        argv for (argv, _, _), (_, _, err) in zip(cases, results, strict=True) if "Traceback" in err
    ]
    assert tracebacks == [], tracebacks
    for (argv, _, _), (code, _, err) in zip(cases, results, strict=True):
        assert code != 0, argv
        assert err.strip(), argv
        # argparse's usage errors print usage + one line; every other refusal is one line
        lines = [x for x in err.strip().splitlines() if not x.startswith(("usage:", " "))]
        assert len(lines) == 1, (argv, err)
    codes = {argv: code for (argv, _, _), (code, _, _) in zip(cases, results, strict=True)}
    for argv in list(codes)[:13]:
        assert codes[argv] == EXIT_USAGE, (argv, codes[argv])
    assert "https://gateway.example.com:8080" in results[0][2]  # says what to write instead
    assert "--api-key-stdin" in results[6][2] and "MESH_API_KEY" in results[6][2]


async def test_loopback_without_scheme_means_http(world, gateway, uniq, tmp_path):
    _, b = await world.pair(uniq)
    host = gateway.split("://", 1)[1]
    code, out, err = await run_mesh(
        "--url", host, "--api-key", b.api_key, "whoami", env=mesh_env("", None, tmp_path)
    )
    assert code == 0, err
    assert out.startswith(b.agent_id)


async def test_login_reads_the_key_from_stdin(world, gateway, uniq, tmp_path):
    _, b = await world.pair(uniq)
    env = mesh_env("", None, tmp_path)
    del env["MESH_URL"]
    code, out, err = await run_mesh(
        "login", "--url", gateway + "/", "--api-key-stdin", env=env, stdin=f"{b.api_key}\n".encode()
    )
    assert code == 0, err
    assert b.agent_id in out
    saved = json.loads((tmp_path / "home" / "mesh-config.json").read_text())
    assert saved == {"url": gateway, "api_key": b.api_key}
    code, out, _ = await run_mesh("whoami", env=env)
    assert code == 0 and out.startswith(b.agent_id)


async def test_the_install_hint_names_what_installs(tmp_path):
    code, out, _ = await run_mesh("agent", "--help", env=mesh_env("", None, tmp_path))
    assert code == 0
    assert "pip install './meshd[claude]'" in " ".join(out.split())
    assert "agent-meshd[" not in out
