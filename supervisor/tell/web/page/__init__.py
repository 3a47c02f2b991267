"""The fleet page: server-rendered HTML (Jinja2, autoescaped) with a little JavaScript, served by
the daemon's aiohttp server; live through server-sent events from the store's timeline; actions
through the control API with a token. Mounted by `supervisor.tell.web.http`."""
