"""The cluster's HTTP API server on the head (default http://127.0.0.1:8265).

Shape (for everyone who adds routes):

- Process. The head's daemon binds the port itself before it reports READY (a port in use
  fails `raylite start --head` naming `--dashboard-port`; a local `init()` on the default
  port falls back to a free port with a warning, as Ray does, while an explicit
  `dashboard_port=` in use is an error naming it). The first connection to the port starts
  `python -m raylite.dashboard.server` (see raylite/_core/head/dashboard_process.py), which
  inherits the socket and serves it with uvicorn. So `init()` pays nothing for the server
  and an unused API costs no memory; the server dies with the head (parent-death signal)
  and is started again by the next request if it exits. `init(include_dashboard=False)`,
  `raylite start --head --include-dashboard=false` or RAYLITE_INCLUDE_DASHBOARD=0 turn it off.
- Layering. This package is L6: it may import raylite._core's L0-L2 modules (ids, config,
  protocol, transport, packaging, sessions) and talks to the head only through protocol
  messages over its own rpc connection (`ctx.head.request(msg)`). It never imports the
  process roles (head, node, worker, driver) or the driver's runtime.
- App. `raylite.dashboard.app.build_app(ctx) -> Starlette` mounts the routes of every module
  in the package `raylite.dashboard.routes` that defines `routes(ctx) -> list[BaseRoute]`
  (discovered with pkgutil; adding routes/metrics.py or routes/ui.py needs no other edit).
  A module may also define `async def startup(ctx)` / `async def shutdown(ctx)`.
- Context. `ctx` is a `raylite.dashboard.context.DashboardContext`: the head client
  (`await ctx.head.request(msg)`; `ctx.head.request_peer(address, msg)` for a node), the
  frozen Config, the session dir, the cluster token, the head's node id, the server's URL and
  the address a job's driver joins (`ctx.cluster_address`), plus coroutines returning Ray-shaped state rows: `await ctx.nodes()`,
  `ctx.actors()`, `ctx.tasks()`, `ctx.jobs()`, `ctx.placement_groups()`, `ctx.workers()`,
  and `ctx.log_files()`; `ctx.extras` is a dict where route modules keep their own state
  (e.g. the job manager under "jobs").
- Auth. Every request, on every route, must carry the cluster token: `Authorization: Bearer
  <token>` or `X-Ray-Authorization: Bearer <token>` (KubeRay's), `?token=<token>` in the URL, or the `raylite_token_<port>` cookie that such a URL
  sets (a browser's page load is redirected to the URL without the token; see auth.py). A
  browser without the token gets an HTML page saying where to find it. A missing or wrong token is answered 401 before any route runs (a websocket
  is closed with code 4401 before it is accepted). RAYLITE_DASHBOARD_LOOPBACK_WITHOUT_TOKEN=1
  lets clients on 127.0.0.1 skip it when the server binds only to loopback; off loopback the
  token is always required. raylite's own clients (CLI, JobSubmissionClient, util.state) find
  the token as the rest of raylite does (RAYLITE_TOKEN, or the head's token file).
- Routes here: /api/version, /api/cluster_status (routes/version.py); Ray's jobs API under
  /api/jobs/ and /api/packages/ (routes/jobs.py); Ray's state API under /api/v0/
  (routes/state.py; Ray's own state client gets rows its schemas accept, see ray_shapes.py);
  logs under /api/v0/logs (routes/logs.py); the Chrome trace at /api/v0/tasks/timeline
  (routes/state.py); Ray's Serve REST API under /api/serve/applications/ and /api/ray/version
  (routes/serve.py, driven through a helper driver process, see serve_agent.py).
"""
