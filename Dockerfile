# Static binary on a distroless base. Build: docker build -t globalconfig .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/globalconfig/globalconfig/pkg/cli.Version=${VERSION}" \
      -o /out/globalconfig ./cmd/globalconfig

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/globalconfig /globalconfig
USER 65532:65532
ENTRYPOINT ["/globalconfig"]
CMD ["run"]
