#!/usr/bin/env bash
# Build the offline base image (Debian bookworm minbase + python3) without a registry:
#   bash containers/base/build.sh [TAG [PACKAGE...]]   # default TAG: agentgym/base:bookworm
# Extra Debian packages go into the rootfs too (the web family's base adds chromium), since
# a build inside Docker has no route to a Debian mirror here.
# mmdebstrap needs apt access to a Debian mirror (not a container registry); the rootfs is then
# `docker import`ed. python3-venv is included because Debian's minbase python3 has no pip: the
# family Dockerfiles create a venv and pip-install agentgym from a host-built wheelhouse.
set -euo pipefail
TAG=${1:-agentgym/base:bookworm}
shift || true
INCLUDE=$(IFS=,; echo "python3,python3-venv,ca-certificates${*:+,$*}")
SUITE=${SUITE:-bookworm}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/agentgym-base.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mmdebstrap --quiet --variant=minbase --include="$INCLUDE" \
    "$SUITE" "$WORK/rootfs.tar"
docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    --change 'LABEL agentgym.image=base' \
    --message "agentgym offline base ($SUITE minbase + $INCLUDE)" \
    "$WORK/rootfs.tar" "$TAG" >/dev/null
echo "$TAG"
