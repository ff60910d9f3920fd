"""chatcaps: find what a Hugging Face chat template can do by rendering it, and render one request shape for all."""

from chatcaps.caps import Caps, Control
from chatcaps.detect import detect_caps
from chatcaps.engines import Limits
from chatcaps.errors import (
    ChatcapsError,
    InputError,
    RenderLimitError,
    ServerError,
    SourceError,
    TemplateError,
    TemplateNotFoundError,
    TemplateRenderError,
    TemplateSecurityError,
    TemplateSyntaxError,
)
from chatcaps.intent import ReasoningRecord
from chatcaps.output import ParsedOutput, parse_output
from chatcaps.polyfills import POLYFILLS
from chatcaps.render import ChatTemplate, RenderResult
from chatcaps.reply import Reply, ReplyContext, ReplyStream, parse_reply
from chatcaps.sources import TemplateSource
from chatcaps.vocab import TIER_BUDGETS

__version__ = "0.1.0"

__all__ = [
    "POLYFILLS",
    "TIER_BUDGETS",
    "Caps",
    "ChatTemplate",
    "ChatcapsError",
    "Control",
    "InputError",
    "Limits",
    "ParsedOutput",
    "ReasoningRecord",
    "RenderLimitError",
    "RenderResult",
    "Reply",
    "ReplyContext",
    "ReplyStream",
    "ServerError",
    "SourceError",
    "TemplateError",
    "TemplateNotFoundError",
    "TemplateRenderError",
    "TemplateSecurityError",
    "TemplateSource",
    "TemplateSyntaxError",
    "__version__",
    "detect_caps",
    "parse_output",
    "parse_reply",
]
