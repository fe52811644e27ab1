// Preloaded with `node --import` by scripts/mcp-http: makes every server that listens on a
// bare port listen on 127.0.0.1 only (the reference MCP server binds all interfaces).
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  const isPort = typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port));
  if (isPort && typeof args[1] !== "string") {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
