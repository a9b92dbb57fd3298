# The koordlet image: Debian bookworm, the agent in /opt/koordlet, installed by the same scripts/install.sh the
# Makefile's set-up runs (`scripts/install.sh image`: the runtime half of what `make test` installs).
#
# `make image` builds it with no container registry: BASE is then a Debian root made by debootstrap and committed
# with buildah (see the Makefile). With a registry, `buildah bud .` / `docker build .` start from Debian's image.
ARG BASE=docker.io/library/debian:bookworm-slim
FROM ${BASE}

# The build machine's CA bundle when PyPI is reached through a TLS-intercepting proxy (`make image` mounts it for
# the build only; nothing of it stays in the image)
ARG PIP_CERT
COPY . /src
# /koordlet is where upstream's image has its agent: the Koordinator chart runs `command: [/koordlet]` with upstream's
# flags, so swapping only the image runs ours. No ENTRYPOINT: a manifest's `command` would bypass it, so what one
# did (bcc's kernel headers, tracefs/debugfs) is done by `koordlet run` itself (koordlet/schedlat/hostprep.py).
RUN /src/scripts/install.sh image /opt/koordlet \
    && ln -s /opt/koordlet/bin/koordlet /koordlet \
    && ln -s /opt/koordlet/bin/koordlet /usr/local/bin/koordlet \
    && rm -rf /src /root/.cache

ENV PATH=/opt/koordlet/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
EXPOSE 9316
CMD ["/koordlet", "run"]
