// The guest app of the side-by-side suites (VM and local runtime): one Python script serving two
// services, api (answers) and web (shows the API URL it was given, ${services.api.publicURL}).

/** One script for both services: api answers, web shows the API URL it was given. */
const APP_PY = `import http.server, os, sys
role = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        body = ("api says hi\\n" if role == "api" else "web uses %s\\n" % os.environ["API_URL"]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = answer
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer()
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
`;

/**
 * The body of a sandbox.yaml (no `version:` line: the VM suite's `writeConfig` adds it with the
 * image) whose setup writes the script to `appPath` and whose services api and web run it.
 */
export function twoServicesYaml(appPath: string): string {
  return `profile: tiny
diskGiB: 4
setup:
  - |
    cat > ${appPath} <<'EOF'
${APP_PY.replace(/^/gm, "    ")}
    EOF
services:
  api:
    command: exec python3 app.py api
    health: /
    preview: true
  web:
    command: exec python3 app.py web
    env:
      API_URL: \${services.api.publicURL}
    health: /
    preview: true
`;
}
