/** `tollgate/chain`: networks, contract artifacts, typed contract actions, EIP-712 signers, devnet. */

export {
  assertNotForeign,
  type DeployDeterministicParameters,
  type DeployDeterministicResult,
  deployDeterministic,
} from "./actions/deploy/deployDeterministic.ts";
export {
  type DeterministicAddressParameters,
  deterministicAddress,
  deterministicCalldata,
  deterministicDeployer,
  tollgateSalt,
} from "./actions/deploy/deterministicAddress.ts";
export {
  type PlannedDeployment,
  type PlanTollgateDeploymentParameters,
  planTollgateDeployment,
  type TollgateContractName,
  tollgateContractCode,
} from "./actions/deploy/planTollgateDeployment.ts";
export {
  assertDeterministicDeployer,
  type DeterministicDeployment,
  type ReadDeterministicDeploymentParameters,
  readDeterministicDeployment,
} from "./actions/deploy/readDeterministicDeployment.ts";
export {
  type ReadSettlementTokenParameters,
  readSettlementToken,
  type SettlementToken,
} from "./actions/deploy/readSettlementToken.ts";
export {
  type SimulateDeterministicCodeParameters,
  simulateDeterministicCode,
} from "./actions/deploy/simulateDeterministicCode.ts";
export {
  SETTLER_ITEM_GAS,
  SETTLER_ITEM_GAS_REQUIRED,
  type SettlementItem,
  type SettleParameters,
  settle,
  settleGasLimit,
} from "./actions/settler/settle.ts";
export { type CancelParameters, cancel } from "./actions/subscriptions/cancel.ts";
export { type CancelForParameters, cancelFor } from "./actions/subscriptions/cancelFor.ts";
export { type CollectParameters, collect } from "./actions/subscriptions/collect.ts";
export { type CollectManyParameters, collectMany } from "./actions/subscriptions/collectMany.ts";
export { type CreatePlanParameters, createPlan } from "./actions/subscriptions/createPlan.ts";
export { type DeductAllowanceParameters, deductAllowance } from "./actions/subscriptions/deductAllowance.ts";
export {
  type DeductAllowanceManyParameters,
  deductAllowanceMany,
} from "./actions/subscriptions/deductAllowanceMany.ts";
export { type DeprecatePlanParameters, deprecatePlan } from "./actions/subscriptions/deprecatePlan.ts";
export { type GetIsDueParameters, getIsDue } from "./actions/subscriptions/getIsDue.ts";
export { type GetIsOperatorParameters, getIsOperator } from "./actions/subscriptions/getIsOperator.ts";
export { type GetPlanParameters, getPlan } from "./actions/subscriptions/getPlan.ts";
export { type GetPlanCountParameters, getPlanCount } from "./actions/subscriptions/getPlanCount.ts";
export { type GetSubscriptionParameters, getSubscription } from "./actions/subscriptions/getSubscription.ts";
export {
  type GetSubscriptionCountParameters,
  getSubscriptionCount,
} from "./actions/subscriptions/getSubscriptionCount.ts";
export {
  type GetSubscriptionManagerDomainSeparatorParameters,
  getSubscriptionManagerDomainSeparator,
} from "./actions/subscriptions/getSubscriptionManagerDomainSeparator.ts";
export {
  type GetSubscriptionNonceParameters,
  getSubscriptionNonce,
} from "./actions/subscriptions/getSubscriptionNonce.ts";
export {
  type GetSubscriptionSpendParameters,
  getSubscriptionSpend,
} from "./actions/subscriptions/getSubscriptionSpend.ts";
export { type PauseParameters, pause } from "./actions/subscriptions/pause.ts";
export { type PauseForParameters, pauseFor } from "./actions/subscriptions/pauseFor.ts";
export { type ResumeParameters, resume } from "./actions/subscriptions/resume.ts";
export { type ResumeForParameters, resumeFor } from "./actions/subscriptions/resumeFor.ts";
export { type SetMaxOverageParameters, setMaxOverage } from "./actions/subscriptions/setMaxOverage.ts";
export {
  type SetMaxOverageForParameters,
  setMaxOverageFor,
} from "./actions/subscriptions/setMaxOverageFor.ts";
export { type SetOperatorParameters, setOperator } from "./actions/subscriptions/setOperator.ts";
export { type SetSpendLimitParameters, setSpendLimit } from "./actions/subscriptions/setSpendLimit.ts";
export {
  type SetSpendLimitForParameters,
  setSpendLimitFor,
} from "./actions/subscriptions/setSpendLimitFor.ts";
export { type SubscribeParameters, subscribe } from "./actions/subscriptions/subscribe.ts";
export { type SubscribeForParameters, subscribeFor } from "./actions/subscriptions/subscribeFor.ts";
export { type ApproveTokenParameters, approveToken } from "./actions/usd/approveToken.ts";
export {
  type CancelAuthorizationParameters,
  cancelAuthorization,
} from "./actions/usd/cancelAuthorization.ts";
export {
  type GetAuthorizationStateParameters,
  getAuthorizationState,
} from "./actions/usd/getAuthorizationState.ts";
export { type GetPermitNonceParameters, getPermitNonce } from "./actions/usd/getPermitNonce.ts";
export { type GetTokenAllowanceParameters, getTokenAllowance } from "./actions/usd/getTokenAllowance.ts";
export { type GetTokenBalanceParameters, getTokenBalance } from "./actions/usd/getTokenBalance.ts";
export { type GetTokenDecimalsParameters, getTokenDecimals } from "./actions/usd/getTokenDecimals.ts";
export { type GetTokenDomainParameters, getTokenDomain } from "./actions/usd/getTokenDomain.ts";
export {
  type GetTokenDomainSeparatorParameters,
  getTokenDomainSeparator,
} from "./actions/usd/getTokenDomainSeparator.ts";
export { type GetTokenNameParameters, getTokenName } from "./actions/usd/getTokenName.ts";
export { type GetTokenOwnerParameters, getTokenOwner } from "./actions/usd/getTokenOwner.ts";
export { type GetTokenSymbolParameters, getTokenSymbol } from "./actions/usd/getTokenSymbol.ts";
export {
  type GetTokenTotalSupplyParameters,
  getTokenTotalSupply,
} from "./actions/usd/getTokenTotalSupply.ts";
export { type GetTokenVersionParameters, getTokenVersion } from "./actions/usd/getTokenVersion.ts";
export { type PermitParameters, permit } from "./actions/usd/permit.ts";
export {
  type ReceiveWithAuthorizationParameters,
  receiveWithAuthorization,
} from "./actions/usd/receiveWithAuthorization.ts";
export { signatureArgs } from "./actions/usd/signatureArgs.ts";
export { type TransferTokenParameters, transferToken } from "./actions/usd/transferToken.ts";
export { type TransferTokenFromParameters, transferTokenFrom } from "./actions/usd/transferTokenFrom.ts";
export {
  type TransferWithAuthorizationParameters,
  transferWithAuthorization,
} from "./actions/usd/transferWithAuthorization.ts";
export { type BlacklistAccountParameters, blacklistAccount } from "./actions/usdc/blacklistAccount.ts";
export { type DeployFiatTokenParameters, deployFiatToken } from "./actions/usdc/deployFiatToken.ts";
export {
  deployFiatTokenImplementation,
  linkFiatTokenBytecode,
} from "./actions/usdc/deployFiatTokenImplementation.ts";
export { type GetIsBlacklistedParameters, getIsBlacklisted } from "./actions/usdc/getIsBlacklisted.ts";
export {
  type FiatTokenSetup,
  type InitializeFiatTokenParameters,
  initializeFiatToken,
} from "./actions/usdc/initializeFiatToken.ts";
export { type MintFiatTokenParameters, mintFiatToken } from "./actions/usdc/mintFiatToken.ts";
export {
  FIAT_TOKEN_PROXY_ADMIN_SLOT,
  FIAT_TOKEN_PROXY_IMPLEMENTATION_SLOT,
  type PlaceFiatTokenParameters,
  placeFiatToken,
} from "./actions/usdc/placeFiatToken.ts";
export {
  type UnBlacklistAccountParameters,
  unBlacklistAccount,
} from "./actions/usdc/unBlacklistAccount.ts";
export type { ReadClient, TollgateContracts, WriteClient } from "./clientTypes.ts";
export { batchSettlerAbi, batchSettlerBytecode } from "./contracts/artifacts/BatchSettler.ts";
export {
  subscriptionManagerAbi,
  subscriptionManagerBytecode,
} from "./contracts/artifacts/SubscriptionManager.ts";
export { fiatTokenProxyAbi, fiatTokenProxyBytecode } from "./contracts/circle-usdc/FiatTokenProxy.ts";
export {
  fiatTokenV2_2Abi,
  fiatTokenV2_2Bytecode,
  fiatTokenV2_2LinkReferences,
} from "./contracts/circle-usdc/FiatTokenV2_2.ts";
export { signatureCheckerAbi, signatureCheckerBytecode } from "./contracts/circle-usdc/SignatureChecker.ts";
export {
  type DeploymentFile,
  DeploymentFileSchema,
  deploymentFilePath,
  readDeploymentFile,
  writeDeploymentFile,
} from "./deploymentFile.ts";
export { type DeployTollgateOptions, deployTollgate } from "./deployTollgate.ts";
export {
  decodeSettlerDeferred,
  decodeSettlerEvents,
  type SettlementOutcome,
} from "./events/decodeSettlerEvents.ts";
export {
  decodeSubscriptionEvents,
  getPlanIdFromReceipt,
  getSubscriptionIdFromReceipt,
  subscriptionEventsAbi,
} from "./events/decodeSubscriptionEvents.ts";
export {
  DeductionFailure,
  SubscriptionStatus,
  type SubscriptionStatusName,
  subscriptionStatusName,
} from "./events/subscriptionStatus.ts";
export {
  devnetChain,
  devnetChainId,
  getNetworkConfig,
  type NetworkConfig,
  networks,
} from "./networks.ts";
export { decryptKeystore, type Keystore, KeystoreSchema } from "./signers/decryptKeystore.ts";
export {
  cancelAuthorizationTypes,
  cancelIntentTypes,
  NO_SPEND_LIMIT,
  pauseIntentTypes,
  permitTypes,
  receiveWithAuthorizationTypes,
  resumeIntentTypes,
  setMaxOverageIntentTypes,
  setSpendLimitIntentTypes,
  subscribeIntentTypes,
  subscriptionManagerDomain,
  subscriptionManagerDomainName,
  subscriptionManagerDomainVersion,
  type TokenDomain,
  transferWithAuthorizationTypes,
} from "./signers/eip712Types.ts";
export { privateKeyAccount } from "./signers/privateKeyAccount.ts";
export {
  recoverTransferSigner,
  type TransferAuthorizationFields,
  transferAuthorizationDigest,
} from "./signers/recoverTransferSigner.ts";
export { signCancelAuthorization } from "./signers/signCancelAuthorization.ts";
export { signPermit } from "./signers/signPermit.ts";
export { signReceiveAuthorization } from "./signers/signReceiveAuthorization.ts";
export {
  type IntentDomain,
  signCancelIntent,
  signPauseIntent,
  signResumeIntent,
  signSetMaxOverageIntent,
  signSetSpendLimitIntent,
  signSubscribeIntent,
} from "./signers/signSubscriptionIntents.ts";
export {
  signTransferAuthorization,
  type TransferAuthorization,
} from "./signers/signTransferAuthorization.ts";
export type { TypedDataSigner } from "./signers/typedDataSigner.ts";
export {
  isLowS,
  type VerifyTransferAuthorizationResult,
  verifyTransferAuthorization,
} from "./signers/verifyTransferAuthorization.ts";
export {
  type Anvil,
  type AnvilLogger,
  resolveAnvilBinary,
  type StartAnvilOptions,
  startAnvil,
} from "./startAnvil.ts";
export {
  anvilMnemonic,
  connectDevnet,
  type Devnet,
  type DevnetAccount,
  type DevnetToken,
  type DevnetTokenInfo,
  devnetPrivateKey,
  type StartDevnetOptions,
  setUpDevnet,
  startDevnet,
} from "./startDevnet.ts";
