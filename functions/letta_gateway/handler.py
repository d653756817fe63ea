"""AWS Lambda entry: the app behind Mangum. Configuration is read at init (errors surface in the init log);
Letta and AWS clients are built on first use."""

from mangum import Mangum

from .bootstrap import build_app

app = build_app()
handler = Mangum(app, lifespan="off")
