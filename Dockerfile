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
RUN /src/scripts/install.sh image /opt/koordlet \
    && install -m 0755 /src/deploy/image/entrypoint.sh /usr/local/bin/koordlet-entrypoint \
    && ln -s /opt/koordlet/bin/koordlet /usr/local/bin/koordlet \
    && rm -rf /src /root/.cache

ENV PATH=/opt/koordlet/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
EXPOSE 9316
ENTRYPOINT ["/usr/local/bin/koordlet-entrypoint"]
CMD ["koordlet", "run"]
