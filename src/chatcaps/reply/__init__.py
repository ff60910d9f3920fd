"""The reply side: a template's reply grammar (from Caps) as a transformers `response_template`, and a model's reply
read with transformers' own parser, in one go or streamed as OpenAI deltas. See docs/reply.md."""

from chatcaps.reply.context import ReplyContext
from chatcaps.reply.grammar import end_of_turn_in, response_template
from chatcaps.reply.parse import Reply, ReplyStream, parse_reply

__all__ = ["Reply", "ReplyContext", "ReplyStream", "end_of_turn_in", "parse_reply", "response_template"]
