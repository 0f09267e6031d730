"""GitHub's REST API as the emulator answers it: one module of routes per resource, the response
shapes GitHub's OpenAPI description requires, and the check-run validation rules."""
