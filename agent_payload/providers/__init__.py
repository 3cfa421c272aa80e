"""Model providers: one module per SDK behind the small ``Model`` protocol of ``base``.

``openai`` and ``anthropic`` import their SDK lazily; the core works with neither installed.
"""

from agent_payload.providers.base import Message, Model, ModelReply, ModelRequest, OutputMode

__all__ = ["Message", "Model", "ModelReply", "ModelRequest", "OutputMode"]
