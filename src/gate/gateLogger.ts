/** The narrow logger the gate writes to; a pino logger satisfies it. */
export type GateLogger = {
  debug(object: object, message?: string): void;
  warn(object: object, message?: string): void;
  error(object: object, message?: string): void;
};
