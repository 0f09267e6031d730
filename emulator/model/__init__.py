"""The model stand-in: a scripted stand-in for the model providers' APIs (Anthropic Messages, OpenAI
Responses, OpenAI Chat Completions, Gemini), its HTTP server and the ``baton model-standin`` command.
Tests and the demo only; Baton reaches it through its model gateway, as it would a vendor."""
