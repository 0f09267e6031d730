"""Gemini bodies the gateway passes on (``:generateContent``, ``:streamGenerateContent``, ``:countTokens``).

The Gemini API reads protobuf JSON, which takes every field in lowerCamelCase and in
snake_case alike, so each name is checked in both spellings. Refused: tools the
provider runs (``googleSearch``, ``googleSearchRetrieval``, ``urlContext``,
``codeExecution``, ``fileSearch``, ``googleMaps``, ``computerUse``, ``retrieval``,
``enterpriseWebSearch``, ``mcpServers``) and the parts they leave
(``executableCode``, ``codeExecutionResult``), ``fileData`` (a file the provider would
take from storage or a URL), and ``cachedContent`` (stored state). Generation settings
(``generationConfig``) are numbers and switches about the answer, passed as they are.
"""

from __future__ import annotations

import re

from worker.runner.gateway.refusals import Reason
from worker.runner.gateway.shapes import JSON, Walk, at, field

_S, _R, _T = Reason.SERVER_TOOL, Reason.REMOTE_SOURCE, Reason.STORED_STATE
_SNAKE = re.compile(r"_([a-z])")


def camel(name: str) -> str:
    """``system_instruction`` -> ``systemInstruction``: the one spelling the checks below use."""
    return _SNAKE.sub(lambda m: m.group(1).upper(), name)


def _both(*names: str) -> frozenset[str]:
    snake = [re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), n) for n in names]
    return frozenset((*names, *snake))


def _banned(table: dict[str, tuple[Reason, str]]) -> dict[str, tuple[Reason, str]]:
    return {spelling: why for name, why in table.items() for spelling in _both(name)}


GENERATE_FIELDS = _both(
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "serviceTier",
)
COUNT_FIELDS = _both("contents", "generateContentRequest")
_BODY_BANNED = _banned({"cachedContent": (_T, "cached content the provider keeps for the agent")})
_TOOL_BANNED = _banned(
    dict.fromkeys(
        (
            "googleSearch",
            "googleSearchRetrieval",
            "urlContext",
            "codeExecution",
            "fileSearch",
            "googleMaps",
            "computerUse",
            "retrieval",
            "enterpriseWebSearch",
            "mcpServers",
        ),
        (_S, "a tool the provider runs for the agent"),
    )
)
_PART_BANNED = _banned(
    {
        "fileData": (_R, "a file the provider would take from its storage or a URL"),
        "executableCode": (_S, "code the provider runs"),
        "codeExecutionResult": (_S, "the result of code the provider ran"),
        "toolCall": (_S, "a call to a tool the provider runs"),
        "toolResponse": (_S, "the answer of a tool the provider ran"),
    }
)
_TOOL_CONFIG_BANNED = _banned(
    {
        "includeServerSideToolInvocations": (_S, "the record of tools the provider runs"),
    }
)


def generate(walk: Walk, body: JSON) -> None:
    _Body(walk).generate(body, "")


def count_tokens(walk: Walk, body: JSON) -> None:
    walk.obj(body, "", COUNT_FIELDS, banned=_BODY_BANNED)
    body_walk = _Body(walk)
    body_walk.contents(body.get("contents", []), "contents")
    for key in ("generateContentRequest", "generate_content_request"):
        if key in body:
            inner = walk.obj(body[key], key, GENERATE_FIELDS | _both("model"), banned=_BODY_BANNED)
            body_walk.generate({k: v for k, v in inner.items() if k != "model"}, key)


class _AnyKey(frozenset[str]):
    """Every key: generation settings are numbers and switches about the answer itself."""

    def __contains__(self, key: object) -> bool:
        return True


_ANY = _AnyKey()


class _Body:
    def __init__(self, walk: Walk) -> None:
        self.walk = walk

    def generate(self, body: JSON, where: str) -> None:
        walk = self.walk
        walk.obj(body, where, GENERATE_FIELDS, banned=_BODY_BANNED)
        given = {camel(k): v for k, v in body.items()}
        self.contents(given.get("contents", []), field(where, "contents"))
        if "systemInstruction" in given:
            self.content(given["systemInstruction"], field(where, "systemInstruction"))
        for i, tool in enumerate(walk.items(given.get("tools", []), field(where, "tools"))):
            spot = at(field(where, "tools"), i)
            found = walk.obj(tool, spot, _both("functionDeclarations"), banned=_TOOL_BANNED)
            for key, declarations in found.items():
                if camel(key) == "functionDeclarations":
                    for j, declaration in enumerate(walk.items(declarations, field(spot, key))):
                        self.declaration(declaration, at(field(spot, key), j))
        if "generationConfig" in given:
            walk.obj(given["generationConfig"], field(where, "generationConfig"), _ANY)
        if "toolConfig" in given:
            walk.obj(
                given["toolConfig"],
                field(where, "toolConfig"),
                _both("functionCallingConfig", "retrievalConfig"),
                banned=_TOOL_CONFIG_BANNED,
            )
        if "safetySettings" in given:
            walk.items(given["safetySettings"], field(where, "safetySettings"))

    def contents(self, value: object, where: str) -> None:
        for i, content in enumerate(self.walk.items(value, where)):
            self.content(content, at(where, i))

    def content(self, value: object, where: str) -> None:
        content = self.walk.obj(value, where, frozenset({"role", "parts"}))
        if "role" in content:
            self.walk.one_of(content["role"], field(where, "role"), frozenset({"user", "model", "function"}))
        for i, part in enumerate(self.walk.items(content.get("parts", []), field(where, "parts"))):
            self.part(part, at(field(where, "parts"), i))

    def part(self, value: object, where: str) -> None:
        allowed = _both(
            "text",
            "inlineData",
            "functionCall",
            "functionResponse",
            "thought",
            "thoughtSignature",
            "partMetadata",
            "videoMetadata",
            "mediaResolution",
        )
        part = self.walk.obj(value, where, allowed, banned=_PART_BANNED)
        for key, inner in part.items():
            name = camel(key)
            if name == "inlineData":
                self.walk.obj(inner, field(where, key), _both("mimeType", "data", "displayName"))
            elif name == "functionCall":
                self.walk.obj(
                    inner, field(where, key), _both("id", "name", "args", "partialArgs", "willContinue")
                )
            elif name == "functionResponse":
                allowed_response = _both("id", "name", "response", "parts", "willContinue", "scheduling")
                response = self.walk.obj(inner, field(where, key), allowed_response)
                for j, nested in enumerate(
                    self.walk.items(response.get("parts", []), field(field(where, key), "parts"))
                ):
                    self.part(nested, at(field(field(where, key), "parts"), j))

    def declaration(self, value: object, where: str) -> None:
        allowed = _both(
            "name",
            "description",
            "parameters",
            "parametersJsonSchema",
            "response",
            "responseJsonSchema",
            "behavior",
        )
        declaration = self.walk.obj(value, where, allowed, required=("name",))
        for key, schema in declaration.items():
            if camel(key) in ("parameters", "parametersJsonSchema", "response", "responseJsonSchema"):
                self.walk.schema(schema, field(where, key))
