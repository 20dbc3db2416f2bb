/**
 * Prepaid channels as a facilitator module: a carrier of the `channel` scheme's facilitator part
 * (src/schemes/channel/facilitator.ts) with these options, for facilitators configured through
 * `modules` (`builtinModules: false, modules: [createChannelsModule({ claims: false })]`). The part
 * replaces the built-in one; `createFacilitator({ schemes: [channelFacilitator(options)] })` does the
 * same without a module.
 */

import { carrierModule, type SchemeCarrierModule } from "../../../facilitator/facilitatorModule.ts";
import { type ChannelFacilitatorOptions, channelFacilitator } from "../facilitator.ts";

export type ChannelsModuleOptions = ChannelFacilitatorOptions;

export function createChannelsModule(options: ChannelsModuleOptions = {}): SchemeCarrierModule {
  return carrierModule("channels", [channelFacilitator(options)]);
}

/** The channels module with its defaults. */
export const channelsModule: SchemeCarrierModule = createChannelsModule();
