// Jest's node environment, with `instanceof Error` true for errors made outside the test's realm.
// Jest runs each test file in a V8 context of its own, so an error that Node itself creates (a
// socket's ECONNRESET, an fs ENOENT, a Buffer RangeError) is not an instance of that context's
// Error. Code that reads errors as `err instanceof Error ? err.message : "unknown error"`, ours and
// Gondolin's alike, then took another branch under test than in production: a CI failure once
// said only "virtio bridge error: unknown error". Subclasses keep the ordinary check.
const { TestEnvironment } = require("jest-environment-node");

const ordinary = Function.prototype[Symbol.hasInstance];

class RealmErrorEnvironment extends TestEnvironment {
  constructor(config, context) {
    super(config, context);
    const inner = this.global.Error;
    Object.defineProperty(inner, Symbol.hasInstance, {
      value(value) {
        return ordinary.call(this, value) || (this === inner && value instanceof Error);
      },
    });
  }
}

module.exports = RealmErrorEnvironment;
