"""``dap control log show|verify|monitor`` as subprocesses against real controls on loopback."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import asyncpg

from dap.control.trust import signing
from tests.control.conftest import MakeDsn, Start
from tests.control.test_cli import run
from tests.control.test_tlog import register


def lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.strip().splitlines()]


async def test_show_and_verify(start_control: Start, http: aiohttp.ClientSession, db_dsn: str) -> None:
    signer = signing.Signer.generate()
    control = await start_control(signer=signer)
    first = await register(http, control.url, "shop")
    await register(http, control.url, "shop", **{"v2.txt": b"2"})
    key = ("--trusted-key", signer.public_key.hex())
    code, out, err = await run("control", "log", "show", "--control-url", control.url, *key, "--app", "shop")
    assert code == 0, err
    head, *entries = lines(out)
    assert head["tree_head"]["tree_size"] == 3  # type: ignore[index]
    assert [e["index"] for e in entries] == [1, 2]

    code, out, err = await run(
        "control", "log", "verify", "--control-url", control.url, *key, "--artifact", first["artifact_id"]
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["verified"] and summary["tree_size"] == 3
    assert summary["artifacts"][0]["leaf_index"] == 1

    code, _, err = await run("control", "log", "verify", "--control-url", control.url)
    assert code == 0 and "trusting the control's published keys" in err
    stranger = signing.Signer.generate().public_key.hex()
    code, _, err = await run(
        "control", "log", "verify", "--control-url", control.url, "--trusted-key", stranger
    )
    assert code == 1 and "not signed by a trusted key" in err

    connection = await asyncpg.connect(db_dsn)
    try:  # history rewritten in place: the entries no longer give the signed root
        await connection.execute(
            "UPDATE dap_control.log_leaves SET data = replace(encode(data, 'escape'), 'shop', 'shoq')::bytea"
            " WHERE idx = 1"
        )
    finally:
        await connection.close()
    code, _, err = await run("control", "log", "verify", "--control-url", control.url, *key)
    assert code == 1 and "do not give the signed root" in err


async def test_monitor_follows_the_log_and_detects_a_fork(
    start_control: Start, http: aiohttp.ClientSession, make_dsn: MakeDsn, tmp_path: Path
) -> None:
    signer = signing.Signer.generate()
    control = await start_control(signer=signer)
    await register(http, control.url, "shop")
    state = tmp_path / "monitor.json"
    monitor = ("control", "log", "monitor", "--trusted-key", signer.public_key.hex(), "--state", str(state))
    code, out, err = await run(*monitor, "--control-url", control.url, "--rounds", "1")
    assert code == 0, err
    assert [e["index"] for e in lines(out)[:-1]] == [0, 1]
    await register(http, control.url, "shop", **{"v2.txt": b"2"})
    await register(http, control.url, "other", **{"o.txt": b"o"})
    code, out, err = await run(
        *monitor, "--control-url", control.url, "--rounds", "2", "--interval", "0.1", "--app", "shop"
    )
    assert code == 0, err
    *printed, summary = lines(out)
    assert [e["index"] for e in printed] == [2]  # only the new entries, only the app asked for
    assert summary == {"consistent": True, "tree_size": 4}
    assert "log consistent: 2 -> 4 entries" in err

    # The same key signs another history: a fork that is longer, and one that is shorter.
    fork = await start_control(dsn=await make_dsn(), signer=signer)
    for i in range(4):
        await register(http, fork.url, "shop", **{f"f{i}.txt": b"f"})
    code, _, err = await run(*monitor, "--control-url", fork.url, "--rounds", "1")
    assert code == 1
    assert "is not an extension of the head of size 4" in err
    short = await start_control(dsn=await make_dsn(), signer=signer)
    code, _, err = await run(*monitor, "--control-url", short.url, "--rounds", "1")
    assert code == 1 and "the log shrank from 4 to 1" in err
    code, _, err = await run(*monitor, "--control-url", control.url, "--rounds", "1")
    assert code == 0, err  # the state was not moved by the refused forks
