// A module resolve hook for @5app/sns-sqs-big-payload 1.0.1. Its package.json says "type":
// "module", yet its compiled files import one another without the ".js" extension
// ("./sqs-producer"), which Node's ESM loader refuses (ERR_MODULE_NOT_FOUND). This hook adds the
// extension to such relative imports made from inside that package, and to nothing else. It
// works as a synchronous hook (module.registerHooks, Node >= 22.15) and as an off-thread one
// (module.register, Node >= 20.6), where a returned promise is awaited.
const pkgDir = "/node_modules/@5app/sns-sqs-big-payload/dist/";

export function resolve(specifier, context, nextResolve) {
  if (
    context.parentURL?.includes(pkgDir) &&
    /^\.\.?\//.test(specifier) &&
    !/\.[cm]?js$/.test(specifier)
  ) {
    return nextResolve(specifier + ".js", context);
  }
  return nextResolve(specifier, context);
}
