// SPDX-License-Identifier: MIT
pragma solidity 0.8.30;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";
import {Nonces} from "@openzeppelin/contracts/utils/Nonces.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";

/// @title SubscriptionManager
/// @notice Recurring plans paid in any ERC-20 (real USDC included): the manager pulls each period's price
/// from the subscriber to the plan's provider with `transferFrom` under the subscriber's approval, and
/// lets the provider (or an operator it named, such as a facilitator) deduct metered overage up to a
/// per-cycle cap the subscriber chose. Every pull of a subscription also counts against its spend
/// limit, a total the subscriber signed when subscribing (and may raise): one token approval shared by
/// a wallet's subscriptions can then never fund one subscription out of what it was given for another.
/// @dev Billing rules (docs/contracts.md states them for users):
/// - A subscription's period is [periodStart, currentPeriodEnd). It is due when block.timestamp >=
///   currentPeriodEnd; anyone may then `collect` it.
/// - A successful renewal starts the next period at the old end (periods stay anchored), unless that
///   would leave it already due again (the renewal was more than one interval late) or it was PastDue:
///   then the new period starts now, so a subscriber is never charged for time without service.
/// - A failed pull marks the subscription PastDue and emits RenewalFailed without reverting; a later
///   `collect` that succeeds makes it Active again.
/// - Pause stops renewals and service, never the clock: the period keeps running on wall time while
///   paused, so pausing never extends a paid period. Resuming before currentPeriodEnd makes the
///   subscription Active again in the same period (no charge); resuming at or after it charges a new
///   period starting at the resume (a failed pull reverts, leaving it Paused). A paused subscription is
///   never due: `collect` reverts and `collectMany` skips it.
/// - Spend limit: `spent` counts everything pulled for a subscription (first period, renewals, the
///   charge of a resume, overage). A pull that would take `spent` past `spendLimit` does not happen: a
///   subscribe or resume reverts SpendLimitReached, a renewal fails (PastDue, RenewalFailed carrying
///   that error), a deduction fails (AllowanceExhausted / FAILURE_SPEND_LIMIT). type(uint256).max is no limit.
contract SubscriptionManager is EIP712, Nonces, ReentrancyGuard {
    enum Status {
        None,
        Active,
        Paused,
        Cancelled,
        PastDue
    }

    struct Plan {
        address provider;
        address token;
        uint256 amount;
        uint64 interval;
        uint64 includedUnits;
        uint256 overageUnitPrice;
        bool deprecated;
        uint256 successorPlanId;
    }

    struct Subscription {
        address subscriber;
        uint256 planId;
        Status status;
        uint64 createdAt;
        uint64 periodStart;
        /// The end of the paid period, which is also when the next charge falls due.
        uint64 currentPeriodEnd;
        /// While Paused: the paid seconds that were left when it was paused (information only: the period
        /// keeps running while paused, so this is not restored on resume). Otherwise 0.
        uint64 pausedRemaining;
        uint256 maxOverage;
        uint256 overageUsed;
    }

    /// Kept beside Subscription, not in it, so `subscriptions(id)` answers as managers deployed before
    /// the spend limit do and one reader serves both; `spendOf(id)` reads it.
    struct Spend {
        /// The most that may ever be pulled for the subscription, as the subscriber signed it (or set it).
        uint256 limit;
        /// Everything pulled for it so far; never above limit.
        uint256 spent;
    }

    /// Why a batch item did not go through (DeductionFailed.reason).
    uint8 public constant FAILURE_NOT_ACTIVE = 1;
    uint8 public constant FAILURE_ALLOWANCE_EXHAUSTED = 2;
    uint8 public constant FAILURE_TRANSFER_FAILED = 3;
    /// The provider's ref was deducted before (the earlier AllowanceDeducted is the deduction).
    uint8 public constant FAILURE_REF_USED = 4;
    /// The deduction would take the subscription past its spend limit.
    uint8 public constant FAILURE_SPEND_LIMIT = 5;

    /// Gas forwarded to the token's `transferFrom` in each pull. A standard ERC-20 (USDC included) needs
    /// well under half of it even when the payee's balance slot is new; a token that wants more fails
    /// its own item, and a token that burns everything it is given costs each batch at most this much.
    uint256 public constant PULL_GAS = 100_000;
    /// Revert data kept in RenewalFailed.reason: enough for a custom error with three words or an
    /// Error(string) of a typical message, never more, whatever a token returns.
    uint256 public constant MAX_REASON_BYTES = 256;
    /// Gas that must be left before a pull: EIP-150 forwards at most 63/64 of what remains after the
    /// call's own cost (up to 2 600 for a cold token address), so with this much the token is sure to get
    /// all of PULL_GAS and a failure is the token's doing, never the caller's choice of gas limit.
    uint256 private constant PULL_GAS_RESERVE = PULL_GAS + PULL_GAS / 63 + 5_000;

    bytes32 public constant SUBSCRIBE_TYPEHASH =
        keccak256(
            "Subscribe(address subscriber,uint256 planId,uint256 maxOverage,uint256 spendLimit,uint256 nonce,uint256 deadline)"
        );
    bytes32 public constant PAUSE_TYPEHASH =
        keccak256("Pause(uint256 subscriptionId,uint256 nonce,uint256 deadline)");
    bytes32 public constant RESUME_TYPEHASH =
        keccak256("Resume(uint256 subscriptionId,uint256 nonce,uint256 deadline)");
    bytes32 public constant CANCEL_TYPEHASH =
        keccak256("Cancel(uint256 subscriptionId,uint256 nonce,uint256 deadline)");
    bytes32 public constant SET_MAX_OVERAGE_TYPEHASH =
        keccak256("SetMaxOverage(uint256 subscriptionId,uint256 maxOverage,uint256 nonce,uint256 deadline)");
    bytes32 public constant SET_SPEND_LIMIT_TYPEHASH =
        keccak256("SetSpendLimit(uint256 subscriptionId,uint256 spendLimit,uint256 nonce,uint256 deadline)");

    uint256 public planCount;
    uint256 public subscriptionCount;
    mapping(uint256 planId => Plan) private _plans;
    mapping(uint256 subscriptionId => Subscription) private _subscriptions;
    mapping(uint256 subscriptionId => Spend) private _spend;
    mapping(address provider => mapping(address operator => bool)) public isOperator;
    /// Refs under which a provider's deductions went through: each deducts at most once, so a deduction
    /// sent again (a batch re-sent after a restart, a second instance, a replaced transaction) charges
    /// nothing more. Per provider, so no one else can use up a provider's refs.
    mapping(address provider => mapping(bytes32 ref => bool)) public refUsed;

    event PlanCreated(
        uint256 indexed planId,
        address indexed provider,
        address indexed token,
        uint256 amount,
        uint64 interval,
        uint64 includedUnits,
        uint256 overageUnitPrice
    );
    event PlanDeprecated(uint256 indexed planId, uint256 indexed successorPlanId);
    event OperatorSet(address indexed provider, address indexed operator, bool allowed);
    event SubscriptionCreated(
        uint256 indexed subscriptionId,
        uint256 indexed planId,
        address indexed subscriber,
        uint256 amount,
        uint64 periodStart,
        uint64 periodEnd,
        uint256 maxOverage
    );
    event SubscriptionRenewed(
        uint256 indexed subscriptionId, uint256 indexed planId, uint256 amount, uint64 periodStart, uint64 periodEnd
    );
    event RenewalFailed(uint256 indexed subscriptionId, uint256 indexed planId, uint256 amount, bytes reason);
    event SubscriptionPaused(uint256 indexed subscriptionId, uint64 remaining);
    event SubscriptionResumed(uint256 indexed subscriptionId, uint64 periodEnd, bool charged);
    event SubscriptionCancelled(uint256 indexed subscriptionId, address indexed by);
    event MaxOverageSet(uint256 indexed subscriptionId, uint256 maxOverage);
    /// Emitted at subscribe (after SubscriptionCreated, whose signature stays as older managers emit it,
    /// so one indexer reads both) and whenever the subscriber sets a new limit.
    event SpendLimitSet(uint256 indexed subscriptionId, uint256 spendLimit);
    event AllowanceDeducted(
        uint256 indexed subscriptionId, bytes32 indexed ref, uint256 amount, uint256 overageUsed, uint256 maxOverage
    );
    event DeductionFailed(uint256 indexed subscriptionId, bytes32 indexed ref, uint256 amount, uint8 reason);

    error PlanNotFound(uint256 planId);
    error PlanIsDeprecated(uint256 planId, uint256 successorPlanId);
    error InvalidInterval();
    error NotPlanProvider(uint256 planId, address caller);
    error SubscriptionNotFound(uint256 subscriptionId);
    error NotSubscriber(uint256 subscriptionId, address caller);
    error NotSubscriberOrProvider(uint256 subscriptionId, address caller);
    error NotProviderOrOperator(uint256 subscriptionId, address caller);
    error InvalidStatus(uint256 subscriptionId, Status status);
    error NotDue(uint256 subscriptionId, uint64 dueAt);
    error AllowanceExhausted(uint256 subscriptionId, uint256 overageUsed, uint256 maxOverage, uint256 amount);
    error TransferFailed(address token, address from, address to, uint256 amount);
    error SignatureExpired(uint256 deadline);
    error InvalidSignature();
    error LengthMismatch();
    error RefAlreadyUsed(uint256 subscriptionId, bytes32 ref);
    /// The transaction's gas limit left too little for a token call to get PULL_GAS; send more gas.
    error InsufficientGasForPull(uint256 gasLeft, uint256 needed);
    /// A pull of `amount` would take the subscription's total past the spend limit its subscriber signed.
    error SpendLimitReached(uint256 subscriptionId, uint256 spent, uint256 spendLimit, uint256 amount);

    constructor() EIP712("Tollgate SubscriptionManager", "1") {}

    // solhint-disable-next-line func-name-mixedcase
    function DOMAIN_SEPARATOR() external view returns (bytes32) {
        return _domainSeparatorV4();
    }

    // ---------------------------------------------------------------- views

    function plans(uint256 planId) external view returns (Plan memory) {
        return _plans[planId];
    }

    function subscriptions(uint256 subscriptionId) external view returns (Subscription memory) {
        return _subscriptions[subscriptionId];
    }

    /// @notice The subscription's spend limit and what has been pulled for it so far.
    function spendOf(uint256 subscriptionId) external view returns (uint256 spendLimit, uint256 spent) {
        Spend storage sp = _spend[subscriptionId];
        return (sp.limit, sp.spent);
    }

    /// @notice True when `collect(subscriptionId)` would try to charge now.
    function isDue(uint256 subscriptionId) public view returns (bool) {
        Subscription storage s = _subscriptions[subscriptionId];
        return (s.status == Status.Active || s.status == Status.PastDue) && block.timestamp >= s.currentPeriodEnd;
    }

    // ---------------------------------------------------------------- plans

    /// @notice Creates a plan whose payee is the caller. Plan ids start at 1.
    function createPlan(address token, uint256 amount, uint64 interval, uint64 includedUnits, uint256 overageUnitPrice)
        external
        returns (uint256 planId)
    {
        if (interval == 0) revert InvalidInterval();
        planId = ++planCount;
        _plans[planId] = Plan({
            provider: msg.sender,
            token: token,
            amount: amount,
            interval: interval,
            includedUnits: includedUnits,
            overageUnitPrice: overageUnitPrice,
            deprecated: false,
            successorPlanId: 0
        });
        emit PlanCreated(planId, msg.sender, token, amount, interval, includedUnits, overageUnitPrice);
    }

    /// @notice Closes a plan to new subscribers; existing subscriptions keep renewing. `successorPlanId`
    /// (0 for none) is what new subscribers are pointed to.
    function deprecatePlan(uint256 planId, uint256 successorPlanId) external {
        Plan storage p = _plans[planId];
        if (p.provider == address(0)) revert PlanNotFound(planId);
        if (p.provider != msg.sender) revert NotPlanProvider(planId, msg.sender);
        if (successorPlanId != 0 && _plans[successorPlanId].provider == address(0)) {
            revert PlanNotFound(successorPlanId);
        }
        p.deprecated = true;
        p.successorPlanId = successorPlanId;
        emit PlanDeprecated(planId, successorPlanId);
    }

    /// @notice Lets `operator` deduct allowances on the caller's plans (per provider, not per plan).
    function setOperator(address operator, bool allowed) external {
        isOperator[msg.sender][operator] = allowed;
        emit OperatorSet(msg.sender, operator, allowed);
    }

    // ---------------------------------------------------------------- subscribe

    /// @notice Subscribes the caller and charges the first period at once. Nothing beyond `spendLimit`
    /// in total (first period included) is ever pulled for the subscription; type(uint256).max for no limit.
    function subscribe(uint256 planId, uint256 maxOverage, uint256 spendLimit)
        external
        nonReentrant
        returns (uint256)
    {
        return _subscribe(msg.sender, planId, maxOverage, spendLimit);
    }

    /// @notice Relayed subscribe: `signature` is the subscriber's EIP-712 Subscribe intent, so a relayer
    /// pays the gas. Pair it with the token's `permit` for the approval and the subscriber needs no ETH.
    function subscribeFor(
        address subscriber,
        uint256 planId,
        uint256 maxOverage,
        uint256 spendLimit,
        uint256 deadline,
        bytes calldata signature
    ) external nonReentrant returns (uint256) {
        if (block.timestamp > deadline) revert SignatureExpired(deadline);
        bytes32 structHash = keccak256(
            abi.encode(SUBSCRIBE_TYPEHASH, subscriber, planId, maxOverage, spendLimit, _useNonce(subscriber), deadline)
        );
        _checkSignature(subscriber, structHash, signature);
        return _subscribe(subscriber, planId, maxOverage, spendLimit);
    }

    function _subscribe(address subscriber, uint256 planId, uint256 maxOverage, uint256 spendLimit)
        private
        returns (uint256 id)
    {
        Plan storage p = _plans[planId];
        if (p.provider == address(0)) revert PlanNotFound(planId);
        if (p.deprecated) revert PlanIsDeprecated(planId, p.successorPlanId);
        if (p.amount > spendLimit) revert SpendLimitReached(subscriptionCount + 1, 0, spendLimit, p.amount);
        _pull(p.token, subscriber, p.provider, p.amount);
        id = ++subscriptionCount;
        uint64 start = uint64(block.timestamp);
        uint64 end = start + p.interval;
        _subscriptions[id] = Subscription({
            subscriber: subscriber,
            planId: planId,
            status: Status.Active,
            createdAt: start,
            periodStart: start,
            currentPeriodEnd: end,
            pausedRemaining: 0,
            maxOverage: maxOverage,
            overageUsed: 0
        });
        _spend[id] = Spend({limit: spendLimit, spent: p.amount});
        emit SubscriptionCreated(id, planId, subscriber, p.amount, start, end, maxOverage);
        emit SpendLimitSet(id, spendLimit);
    }

    // ---------------------------------------------------------------- renewals

    /// @notice Charges a due subscription. Reverts when it is not due; a failed pull does not revert but
    /// marks it PastDue (returns false).
    function collect(uint256 subscriptionId) external nonReentrant returns (bool) {
        Subscription storage s = _subscriptions[subscriptionId];
        if (s.subscriber == address(0)) revert SubscriptionNotFound(subscriptionId);
        if (s.status != Status.Active && s.status != Status.PastDue) revert InvalidStatus(subscriptionId, s.status);
        if (block.timestamp < s.currentPeriodEnd) revert NotDue(subscriptionId, s.currentPeriodEnd);
        return _renew(subscriptionId, s);
    }

    /// @notice Charges every due subscription among `ids`; items not due (or not renewable) are skipped.
    /// `ok[i]` is true only when item i was charged.
    function collectMany(uint256[] calldata ids) external nonReentrant returns (bool[] memory ok) {
        ok = new bool[](ids.length);
        for (uint256 i = 0; i < ids.length; ++i) {
            if (isDue(ids[i])) ok[i] = _renew(ids[i], _subscriptions[ids[i]]);
        }
    }

    function _renew(uint256 id, Subscription storage s) private returns (bool) {
        Plan storage p = _plans[s.planId];
        bool ok;
        bytes memory reason;
        Spend storage sp = _spend[id];
        if (_withinSpendLimit(sp, p.amount)) {
            (ok, reason) = _tryPull(p.token, s.subscriber, p.provider, p.amount);
        } else {
            reason = abi.encodeWithSelector(SpendLimitReached.selector, id, sp.spent, sp.limit, p.amount);
        }
        if (!ok) {
            s.status = Status.PastDue;
            emit RenewalFailed(id, s.planId, p.amount, reason);
            return false;
        }
        sp.spent += p.amount;
        uint64 start = s.currentPeriodEnd;
        if (s.status == Status.PastDue || start + p.interval <= block.timestamp) start = uint64(block.timestamp);
        s.status = Status.Active;
        s.periodStart = start;
        s.currentPeriodEnd = start + p.interval;
        s.overageUsed = 0;
        emit SubscriptionRenewed(id, s.planId, p.amount, start, s.currentPeriodEnd);
        return true;
    }

    // ---------------------------------------------------------------- subscriber controls

    function pause(uint256 subscriptionId) external nonReentrant {
        _pause(subscriptionId, _subscriberOnly(subscriptionId));
    }

    function pauseFor(uint256 subscriptionId, uint256 deadline, bytes calldata signature) external nonReentrant {
        _pause(subscriptionId, _relayed(PAUSE_TYPEHASH, subscriptionId, deadline, signature));
    }

    function resume(uint256 subscriptionId) external nonReentrant {
        _resume(subscriptionId, _subscriberOnly(subscriptionId));
    }

    function resumeFor(uint256 subscriptionId, uint256 deadline, bytes calldata signature) external nonReentrant {
        _resume(subscriptionId, _relayed(RESUME_TYPEHASH, subscriptionId, deadline, signature));
    }

    /// @notice Ends a subscription at once (no refund); the subscriber or the plan's provider may cancel.
    function cancel(uint256 subscriptionId) external nonReentrant {
        Subscription storage s = _existing(subscriptionId);
        if (msg.sender != s.subscriber && msg.sender != _plans[s.planId].provider) {
            revert NotSubscriberOrProvider(subscriptionId, msg.sender);
        }
        _cancel(subscriptionId, s, msg.sender);
    }

    function cancelFor(uint256 subscriptionId, uint256 deadline, bytes calldata signature) external nonReentrant {
        Subscription storage s = _relayed(CANCEL_TYPEHASH, subscriptionId, deadline, signature);
        _cancel(subscriptionId, s, s.subscriber);
    }

    /// @notice Sets the cap on overage deducted per cycle. A cap below what this cycle already used stops
    /// further deductions until the next renewal.
    function setMaxOverage(uint256 subscriptionId, uint256 maxOverage) external nonReentrant {
        _setMaxOverage(subscriptionId, _subscriberOnly(subscriptionId), maxOverage);
    }

    function setMaxOverageFor(uint256 subscriptionId, uint256 maxOverage, uint256 deadline, bytes calldata signature)
        external
        nonReentrant
    {
        if (block.timestamp > deadline) revert SignatureExpired(deadline);
        Subscription storage s = _existing(subscriptionId);
        bytes32 structHash = keccak256(
            abi.encode(SET_MAX_OVERAGE_TYPEHASH, subscriptionId, maxOverage, _useNonce(s.subscriber), deadline)
        );
        _checkSignature(s.subscriber, structHash, signature);
        _setMaxOverage(subscriptionId, s, maxOverage);
    }

    /// @notice Sets the most that may ever be pulled for the subscription in total (what it already
    /// spent included). A limit at or below `spent` stops every further pull.
    function setSpendLimit(uint256 subscriptionId, uint256 spendLimit) external nonReentrant {
        _setSpendLimit(subscriptionId, _subscriberOnly(subscriptionId), spendLimit);
    }

    function setSpendLimitFor(uint256 subscriptionId, uint256 spendLimit, uint256 deadline, bytes calldata signature)
        external
        nonReentrant
    {
        if (block.timestamp > deadline) revert SignatureExpired(deadline);
        Subscription storage s = _existing(subscriptionId);
        bytes32 structHash = keccak256(
            abi.encode(SET_SPEND_LIMIT_TYPEHASH, subscriptionId, spendLimit, _useNonce(s.subscriber), deadline)
        );
        _checkSignature(s.subscriber, structHash, signature);
        _setSpendLimit(subscriptionId, s, spendLimit);
    }

    function _pause(uint256 id, Subscription storage s) private {
        if (s.status != Status.Active) revert InvalidStatus(id, s.status);
        uint64 remaining = block.timestamp < s.currentPeriodEnd ? s.currentPeriodEnd - uint64(block.timestamp) : 0;
        s.status = Status.Paused;
        s.pausedRemaining = remaining;
        emit SubscriptionPaused(id, remaining);
    }

    function _resume(uint256 id, Subscription storage s) private {
        if (s.status != Status.Paused) revert InvalidStatus(id, s.status);
        uint64 nowTs = uint64(block.timestamp);
        s.status = Status.Active;
        s.pausedRemaining = 0;
        if (nowTs < s.currentPeriodEnd) {
            // The period ran on while paused and is not over: the same period continues, no charge and
            // no extension, so a pause/resume cycle can never stretch what was paid for.
            emit SubscriptionResumed(id, s.currentPeriodEnd, false);
            return;
        }
        // The period ended (before or while paused): resuming starts (and charges) a new one. A failed pull
        // reverts, leaving the subscription Paused, so the subscriber learns at once that it cannot pay.
        Plan storage p = _plans[s.planId];
        Spend storage sp = _spend[id];
        if (!_withinSpendLimit(sp, p.amount)) revert SpendLimitReached(id, sp.spent, sp.limit, p.amount);
        _pull(p.token, s.subscriber, p.provider, p.amount);
        sp.spent += p.amount;
        s.periodStart = nowTs;
        s.currentPeriodEnd = nowTs + p.interval;
        s.overageUsed = 0;
        emit SubscriptionRenewed(id, s.planId, p.amount, nowTs, s.currentPeriodEnd);
        emit SubscriptionResumed(id, s.currentPeriodEnd, true);
    }

    function _cancel(uint256 id, Subscription storage s, address by) private {
        if (s.status == Status.Cancelled) revert InvalidStatus(id, s.status);
        s.status = Status.Cancelled;
        s.pausedRemaining = 0;
        emit SubscriptionCancelled(id, by);
    }

    function _setMaxOverage(uint256 id, Subscription storage s, uint256 maxOverage) private {
        if (s.status == Status.Cancelled) revert InvalidStatus(id, s.status);
        s.maxOverage = maxOverage;
        emit MaxOverageSet(id, maxOverage);
    }

    function _setSpendLimit(uint256 id, Subscription storage s, uint256 spendLimit) private {
        if (s.status == Status.Cancelled) revert InvalidStatus(id, s.status);
        _spend[id].limit = spendLimit;
        emit SpendLimitSet(id, spendLimit);
    }

    // ---------------------------------------------------------------- metered allowance

    /// @notice Pulls `amount` of metered overage from the subscriber to the provider now. Only the plan's
    /// provider or its operator may call. Reverts AllowanceExhausted when this cycle's overage would pass
    /// the subscriber's cap, and RefAlreadyUsed when the provider deducted under `ref` before.
    function deductAllowance(uint256 subscriptionId, uint256 amount, bytes32 ref) external nonReentrant {
        Subscription storage s = _existing(subscriptionId);
        Plan storage p = _plans[s.planId];
        _checkProviderOrOperator(subscriptionId, p.provider);
        if (refUsed[p.provider][ref]) revert RefAlreadyUsed(subscriptionId, ref);
        if (s.status != Status.Active) revert InvalidStatus(subscriptionId, s.status);
        if (!_withinCap(s, amount)) revert AllowanceExhausted(subscriptionId, s.overageUsed, s.maxOverage, amount);
        Spend storage sp = _spend[subscriptionId];
        if (!_withinSpendLimit(sp, amount)) revert SpendLimitReached(subscriptionId, sp.spent, sp.limit, amount);
        refUsed[p.provider][ref] = true;
        uint256 used = s.overageUsed + amount;
        s.overageUsed = used;
        sp.spent += amount;
        _pull(p.token, s.subscriber, p.provider, amount);
        emit AllowanceDeducted(subscriptionId, ref, amount, used, s.maxOverage);
    }

    /// @notice Batch form of deductAllowance with per-item outcomes: an item whose ref the provider deducted
    /// under before, that is not Active, would pass its cap, or whose pull fails emits DeductionFailed and
    /// returns false, without affecting the others (a failed item does not use up its ref).
    /// A caller that is not the provider or an operator of an item's plan reverts the whole call, as does
    /// an unknown id: those are caller faults, not outcomes.
    function deductAllowanceMany(uint256[] calldata ids, uint256[] calldata amounts, bytes32[] calldata refs)
        external
        nonReentrant
        returns (bool[] memory ok)
    {
        if (ids.length != amounts.length || ids.length != refs.length) revert LengthMismatch();
        ok = new bool[](ids.length);
        for (uint256 i = 0; i < ids.length; ++i) {
            ok[i] = _tryDeduct(ids[i], amounts[i], refs[i]);
        }
    }

    function _tryDeduct(uint256 id, uint256 amount, bytes32 ref) private returns (bool) {
        Subscription storage s = _existing(id);
        Plan storage p = _plans[s.planId];
        _checkProviderOrOperator(id, p.provider);
        if (refUsed[p.provider][ref]) {
            emit DeductionFailed(id, ref, amount, FAILURE_REF_USED);
            return false;
        }
        if (s.status != Status.Active) {
            emit DeductionFailed(id, ref, amount, FAILURE_NOT_ACTIVE);
            return false;
        }
        if (!_withinCap(s, amount)) {
            emit DeductionFailed(id, ref, amount, FAILURE_ALLOWANCE_EXHAUSTED);
            return false;
        }
        Spend storage sp = _spend[id];
        if (!_withinSpendLimit(sp, amount)) {
            emit DeductionFailed(id, ref, amount, FAILURE_SPEND_LIMIT);
            return false;
        }
        (bool pulled,) = _tryPull(p.token, s.subscriber, p.provider, amount);
        if (!pulled) {
            emit DeductionFailed(id, ref, amount, FAILURE_TRANSFER_FAILED);
            return false;
        }
        refUsed[p.provider][ref] = true;
        // Cannot overflow: _withinCap showed overageUsed + amount <= maxOverage.
        uint256 used = s.overageUsed + amount;
        s.overageUsed = used;
        // Cannot overflow: _withinSpendLimit showed spent + amount <= limit.
        sp.spent += amount;
        emit AllowanceDeducted(id, ref, amount, used, s.maxOverage);
        return true;
    }

    // ---------------------------------------------------------------- internals

    function _existing(uint256 id) private view returns (Subscription storage s) {
        s = _subscriptions[id];
        if (s.subscriber == address(0)) revert SubscriptionNotFound(id);
    }

    function _subscriberOnly(uint256 id) private view returns (Subscription storage s) {
        s = _existing(id);
        if (msg.sender != s.subscriber) revert NotSubscriber(id, msg.sender);
    }

    /// overageUsed + amount <= maxOverage, written so that no amount can overflow (an overflow would
    /// revert a whole deductAllowanceMany instead of failing its item). A cap lowered below this cycle's
    /// use admits nothing.
    function _withinCap(Subscription storage s, uint256 amount) private view returns (bool) {
        uint256 used = s.overageUsed;
        uint256 cap = s.maxOverage;
        return used <= cap && amount <= cap - used;
    }

    /// spent + amount <= limit, written so that no amount can overflow.
    function _withinSpendLimit(Spend storage sp, uint256 amount) private view returns (bool) {
        uint256 spent = sp.spent;
        uint256 limit = sp.limit;
        return spent <= limit && amount <= limit - spent;
    }

    function _checkProviderOrOperator(uint256 id, address provider) private view {
        if (msg.sender != provider && !isOperator[provider][msg.sender]) revert NotProviderOrOperator(id, msg.sender);
    }

    /// Verifies a `<Action>(uint256 subscriptionId,uint256 nonce,uint256 deadline)` intent by the subscriber.
    function _relayed(bytes32 typeHash, uint256 id, uint256 deadline, bytes calldata signature)
        private
        returns (Subscription storage s)
    {
        if (block.timestamp > deadline) revert SignatureExpired(deadline);
        s = _existing(id);
        _checkSignature(s.subscriber, keccak256(abi.encode(typeHash, id, _useNonce(s.subscriber), deadline)), signature);
    }

    /// SignatureChecker accepts EOA signatures (low-s only, via OpenZeppelin ECDSA) and ERC-1271 wallets.
    function _checkSignature(address signer, bytes32 structHash, bytes calldata signature) private view {
        if (!SignatureChecker.isValidSignatureNow(signer, _hashTypedDataV4(structHash), signature)) {
            revert InvalidSignature();
        }
    }

    function _pull(address token, address from, address to, uint256 amount) private {
        (bool ok,) = _tryPull(token, from, to, amount);
        if (!ok) revert TransferFailed(token, from, to, amount);
    }

    /// transferFrom as a low-level call whose outcome is reported, never thrown, so one subscription's
    /// token cannot stop a batch (collectMany, deductAllowanceMany) of others:
    /// - the token gets exactly PULL_GAS (the call reverts InsufficientGasForPull up front when the caller
    ///   left too little, so running out inside the token is always the token's failure);
    /// - success is a call that did not revert and returned either nothing (tokens such as USDT that
    ///   predate the standard's return value; the token has code, checked first) or exactly one word
    ///   equal to 1. `false`, any other word, a short or long answer are failures, never a decode revert;
    /// - at most MAX_REASON_BYTES of revert data are copied, so a token returning megabytes costs its
    ///   own gas, not the batch's memory.
    /// `reason` is the (truncated) revert data on failure, empty on success.
    function _tryPull(address token, address from, address to, uint256 amount)
        private
        returns (bool ok, bytes memory reason)
    {
        if (amount == 0) return (true, "");
        if (token.code.length == 0) return (false, "");
        bytes memory data = abi.encodeCall(IERC20.transferFrom, (from, to, amount));
        uint256 left = gasleft();
        if (left < PULL_GAS_RESERVE) revert InsufficientGasForPull(left, PULL_GAS_RESERVE);
        bool success;
        uint256 size;
        uint256 word;
        assembly ("memory-safe") {
            // Return data is not copied by the call (out size 0); only what is read below is.
            success := call(PULL_GAS, token, 0, add(data, 0x20), mload(data), 0, 0)
            size := returndatasize()
            if eq(size, 32) {
                returndatacopy(0, 0, 32)
                word := mload(0)
            }
        }
        if (success && (size == 0 || (size == 32 && word == 1))) return (true, "");
        uint256 kept = size < MAX_REASON_BYTES ? size : MAX_REASON_BYTES;
        reason = new bytes(kept);
        assembly ("memory-safe") {
            returndatacopy(add(reason, 0x20), 0, kept)
        }
    }
}
