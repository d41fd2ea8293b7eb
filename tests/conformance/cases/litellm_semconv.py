"""LiteLLM, as ``litellm_otel.py``, under its "latest GenAI semantic conventions" mode:
OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental (read when the "otel" callback is set up), set before
LiteLLM is imported. The call's span is then ``chat gpt-fake-1`` (kind CLIENT) with ``gen_ai.provider.name``,
``gen_ai.request.stream`` on a stream and ``gen_ai.usage.cache_read.input_tokens``; no ``raw_gen_ai_request``
child. Its parent is chosen as at the defaults: each call is still a trace of its own."""

import os
import runpy

os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
runpy.run_module("tests.conformance.cases.litellm_otel", run_name="__main__")
