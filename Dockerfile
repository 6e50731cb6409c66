# Builds the cqlguard proxy into a small image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /cqlguard ./cmd/cqlguard

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /cqlguard /cqlguard
COPY config.example.yaml /etc/cqlguard/cqlguard.yaml
EXPOSE 9042 9180
ENTRYPOINT ["/cqlguard", "-config", "/etc/cqlguard/cqlguard.yaml"]
