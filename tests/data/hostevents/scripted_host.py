"""A scripted host for the stream specs: `python scripted_host.py FOLDER CMD ARGS...` answers
`journalctl --lines=1` with a head cursor, `journalctl --follow` with FOLDER/follow-N.jsonl
(N = how many follows ran before; the line `EXIT` ends the follow), `systemctl show` with
FOLDER/show.txt; every command line is appended to FOLDER/argv.log."""

import sys
import time
from pathlib import Path

folder, argv = Path(sys.argv[1]), sys.argv[2:]
with (folder / "argv.log").open("a") as log:
    log.write(" ".join(argv) + "\n")
if argv[0] == "systemctl":
    sys.stdout.write((folder / "show.txt").read_text())
elif "--follow" in argv:
    n = sum(1 for line in (folder / "argv.log").read_text().splitlines() if "--follow" in line)
    for line in (folder / f"follow-{n}.jsonl").read_text().splitlines():
        if line == "EXIT":
            sys.stderr.write("journalctl: scripted end\n")
            sys.exit(1)
        print(line, flush=True)
    time.sleep(60)
else:
    print('{"__CURSOR":"s=head;i=1","__REALTIME_TIMESTAMP":"1795590949842285"}')
